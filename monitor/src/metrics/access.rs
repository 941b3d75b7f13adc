//! Who may read what. `/metrics` and `/debug/*` tell every pod's name, namespace, uid and
//! memory, so they answer clients on this host's loopback, and others only as the operator
//! opens them ([`Remote`]): to clients whose bearer token the API server authenticates and
//! authorizes (the review itself is `token_gate`'s), or to anyone. `/healthz` and `/readyz`
//! tell nothing about pods and answer anyone, since the kubelet probes them from the node's
//! address. Every request must also name the agent in its `Host` header by an IP literal,
//! `localhost` or a name the operator allows: a web page whose own name was rebound to this
//! address (DNS rebinding) sends its own name, so a browser on the node cannot be turned
//! into a reader.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hyper::StatusCode;

use super::endpoint_stats::Denial;

/// Who off this host may read `/metrics` and `/debug/*`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Remote {
    /// No one (the default).
    #[default]
    Closed,
    /// A client with a bearer token that a TokenReview authenticates and a
    /// SubjectAccessReview allows to `get` the path (`--metrics-auth kube`).
    Authorized,
    /// Anyone (`--metrics-allow-remote`).
    Anyone,
}

/// The access policy of the endpoints.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    pub remote: Remote,
    /// Names accepted in `Host` besides IP literals and `localhost` (`--metrics-allowed-host`; ASCII case ignored).
    pub allowed_hosts: Vec<String>,
}

/// Why a request is refused: the status and a line saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub reason: &'static str,
    /// What the endpoint counts it as (`None`: a request misdirected, not a reader refused).
    pub denial: Option<Denial>,
}

impl Refusal {
    /// A 401 that asks for a bearer token (its answer carries `WWW-Authenticate: Bearer`).
    pub(crate) fn unauthenticated(reason: &'static str, denial: Denial) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            reason,
            denial: Some(denial),
        }
    }
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict<'a> {
    Serve,
    Refuse(Refusal),
    /// Serve it if the API server says the token may `get` the path.
    Review {
        token: &'a str,
    },
}

impl Access {
    /// What to do when a client at `peer` asks `GET path` with `host` as its `Host` header
    /// and `authorization` as its `Authorization` header.
    pub(crate) fn check<'a>(
        &self,
        path: &str,
        peer: IpAddr,
        host: Option<&str>,
        authorization: Option<&'a str>,
    ) -> Verdict<'a> {
        if !host.is_some_and(|h| self.names_this_agent(h)) {
            return Verdict::Refuse(Refusal {
                status: StatusCode::MISDIRECTED_REQUEST,
                reason: "the Host header must be an IP address, localhost or a name given with \
                         --metrics-allowed-host\n",
                denial: None,
            });
        }
        let open = matches!(path, "/healthz" | "/readyz");
        if open || peer.to_canonical().is_loopback() {
            return Verdict::Serve;
        }
        match self.remote {
            Remote::Anyone => Verdict::Serve,
            Remote::Closed => Verdict::Refuse(Refusal {
                status: StatusCode::FORBIDDEN,
                reason: "served to loopback clients only (see --metrics-auth)\n",
                denial: Some(Denial::Remote),
            }),
            Remote::Authorized => match authorization.and_then(bearer) {
                Some(token) => Verdict::Review { token },
                None => Verdict::Refuse(Refusal::unauthenticated(
                    "send a bearer token whose user RBAC allows to get this path (a \
                     nonResourceURL)\n",
                    Denial::NoToken,
                )),
            },
        }
    }

    /// Whether a `Host` header value (`name`, `name:port`, `[v6]:port`) names this agent.
    fn names_this_agent(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            Some(rest) => {
                let Some((v6, port)) = rest.split_once(']') else {
                    return false;
                };
                return v6.parse::<Ipv6Addr>().is_ok() && is_port_suffix(port);
            }
            None => match host.rsplit_once(':') {
                Some((name, port)) if is_port_suffix(&format!(":{port}")) => name,
                Some(_) => return false,
                None => host,
            },
        };
        name.parse::<Ipv4Addr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }
}

/// The token of an `Authorization: Bearer TOKEN` value (scheme in any case), when it is one
/// and the token is printable ASCII without spaces.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_graphic()))
    .then_some(token)
}

/// True for an empty suffix or `:` and a port number.
fn is_port_suffix(suffix: &str) -> bool {
    suffix.is_empty()
        || suffix
            .strip_prefix(':')
            .is_some_and(|port| port.parse::<u16>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_paths_answer_loopback_and_every_path_needs_a_host_naming_the_agent() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped_loopback: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let remote: IpAddr = "10.1.2.3".parse().unwrap();
        let closed = Access {
            remote: Remote::Closed,
            allowed_hosts: vec!["Node-1.example".into()],
        };
        let open = Access {
            remote: Remote::Anyone,
            ..closed.clone()
        };
        let cases = [
            // (name, access, path, peer, host, refused with)
            (
                "metrics from loopback",
                &closed,
                "/metrics",
                loopback,
                Some("127.0.0.1:9753"),
                None,
            ),
            (
                "ranking from v4-mapped loopback",
                &closed,
                "/debug/ranking",
                mapped_loopback,
                Some("[::1]:9753"),
                None,
            ),
            (
                "metrics from afar",
                &closed,
                "/metrics",
                remote,
                Some("10.1.2.4:9753"),
                Some(403),
            ),
            (
                "ranking from afar",
                &closed,
                "/debug/ranking",
                remote,
                Some("10.1.2.4"),
                Some(403),
            ),
            (
                "another debug path from afar",
                &closed,
                "/debug/x",
                remote,
                Some("10.1.2.4"),
                Some(403),
            ),
            (
                "liveness from afar",
                &closed,
                "/healthz",
                remote,
                Some("10.1.2.4:9753"),
                None,
            ),
            (
                "readiness from afar",
                &closed,
                "/readyz",
                remote,
                Some("10.1.2.4:9753"),
                None,
            ),
            (
                "metrics from afar when opened",
                &open,
                "/metrics",
                remote,
                Some("10.1.2.4:9753"),
                None,
            ),
            (
                "localhost",
                &closed,
                "/metrics",
                loopback,
                Some("LocalHost:9753"),
                None,
            ),
            (
                "an allowed name",
                &closed,
                "/metrics",
                loopback,
                Some("node-1.example:9753"),
                None,
            ),
            (
                "a rebound name",
                &closed,
                "/metrics",
                loopback,
                Some("evil.example:9753"),
                Some(421),
            ),
            (
                "a rebound name, opened",
                &open,
                "/metrics",
                remote,
                Some("evil.example"),
                Some(421),
            ),
            (
                "a rebound name on health",
                &closed,
                "/healthz",
                loopback,
                Some("evil.example"),
                Some(421),
            ),
            (
                "a name ending like localhost",
                &closed,
                "/metrics",
                loopback,
                Some("localhost.evil.example"),
                Some(421),
            ),
            ("no Host", &closed, "/metrics", loopback, None, Some(421)),
            (
                "a bad port",
                &closed,
                "/metrics",
                loopback,
                Some("127.0.0.1:x"),
                Some(421),
            ),
            (
                "an unclosed v6 literal",
                &closed,
                "/metrics",
                loopback,
                Some("[::1"),
                Some(421),
            ),
            (
                "not a v6 literal",
                &closed,
                "/metrics",
                loopback,
                Some("[evil.example]:1"),
                Some(421),
            ),
        ];
        for (name, access, path, peer, host, want) in cases {
            let got = match access.check(path, peer, host, None) {
                Verdict::Serve => None,
                Verdict::Refuse(refusal) => Some(refusal.status.as_u16()),
                Verdict::Review { .. } => panic!("{name}: no review without --metrics-auth"),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn with_kube_auth_a_remote_reader_needs_a_bearer_token_and_loopback_none() {
        let access = Access {
            remote: Remote::Authorized,
            allowed_hosts: vec![],
        };
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let remote: IpAddr = "10.1.2.3".parse().unwrap();
        let host = Some("10.1.2.4:9753");
        let cases = [
            // (name, path, peer, authorization, verdict)
            (
                "loopback, no token",
                "/metrics",
                loopback,
                None,
                Verdict::Serve,
            ),
            ("probe from afar", "/healthz", remote, None, Verdict::Serve),
            (
                "a token",
                "/metrics",
                remote,
                Some("Bearer abc.def-ghi"),
                Verdict::Review {
                    token: "abc.def-ghi",
                },
            ),
            (
                "the scheme in any case",
                "/debug/ranking",
                remote,
                Some("bearer  t0k "),
                Verdict::Review { token: "t0k" },
            ),
        ];
        for (name, path, peer, authorization, want) in cases {
            assert_eq!(
                access.check(path, peer, host, authorization),
                want,
                "{name}"
            );
        }
        for (name, authorization) in [
            ("no header", None),
            ("basic credentials", Some("Basic dXNlcjpwYXNz")),
            ("an empty token", Some("Bearer ")),
            ("a token with a control character", Some("Bearer a\u{7}b")),
        ] {
            let Verdict::Refuse(refusal) = access.check("/metrics", remote, host, authorization)
            else {
                panic!("{name}: served");
            };
            assert_eq!(refusal.status, StatusCode::UNAUTHORIZED, "{name}");
            assert_eq!(refusal.denial, Some(Denial::NoToken), "{name}");
        }
    }
}
