//! Who may read what. `/metrics` and `/debug/*` tell every pod's name, namespace, uid and
//! memory, so they answer only clients on this host's loopback unless the operator opens
//! them ([`Access::remote`]); `/healthz` and `/readyz` tell nothing about pods and answer
//! anyone, since the kubelet probes them from the node's address. Every request must also
//! name the agent in its `Host` header by an IP literal, `localhost` or a name the operator
//! allows: a web page whose own name was rebound to this address (DNS rebinding) sends its
//! own name, so a browser on the node cannot be turned into a reader.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hyper::StatusCode;

/// The access policy of the endpoints.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    /// Serve `/metrics` and `/debug/*` to clients off this host too (`--metrics-allow-remote`).
    pub remote: bool,
    /// Names accepted in `Host` besides IP literals and `localhost` (`--metrics-allowed-host`; ASCII case ignored).
    pub allowed_hosts: Vec<String>,
}

/// Why a request is refused: the status and a line saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub reason: &'static str,
}

impl Access {
    /// `None` when a client at `peer` may `GET path` with `host` as its `Host` header.
    pub(crate) fn check(&self, path: &str, peer: IpAddr, host: Option<&str>) -> Option<Refusal> {
        if !host.is_some_and(|h| self.names_this_agent(h)) {
            return Some(Refusal {
                status: StatusCode::MISDIRECTED_REQUEST,
                reason: "the Host header must be an IP address, localhost or a name given with \
                         --metrics-allowed-host\n",
            });
        }
        let open = matches!(path, "/healthz" | "/readyz");
        if !open && !self.remote && !peer.to_canonical().is_loopback() {
            return Some(Refusal {
                status: StatusCode::FORBIDDEN,
                reason: "served to loopback clients only (see --metrics-allow-remote)\n",
            });
        }
        None
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
            remote: false,
            allowed_hosts: vec!["Node-1.example".into()],
        };
        let open = Access {
            remote: true,
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
            let got = access.check(path, peer, host).map(|r| r.status.as_u16());
            assert_eq!(got, want, "{name}");
        }
    }
}
