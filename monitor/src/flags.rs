//! Flag values shared by the agent and the subcommands: the output format and the parsers
//! clap calls for durations, byte quantities and addresses, one of each for every command. A
//! leaf: it knows nothing of the commands, so they and the command line can both use it.
use std::{
    fmt,
    net::{SocketAddr, ToSocketAddrs as _},
    time::Duration,
};

use crate::engine::{
    attach_distance::AttachWithin, duration::parse_go_duration, quantity::Quantity,
};

/// A Go duration above zero (`100ms`, `1s`, `1m30s`), the syntax of every duration flag.
pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}

/// A Go duration, zero included (`0s` turns a period off); a number without a unit is
/// refused with the unit it needs, as the kubelet refuses it.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text).map_err(|e| {
        let number = text.trim();
        if !number.is_empty() && number != "0" && number.parse::<f64>().is_ok() {
            format!("{number} has no unit: write {number}s for seconds (or ms, m, h)")
        } else {
            e.to_string()
        }
    })
}

/// `HOST:PORT` as given, an IP address (`127.0.0.1:9753`, `[::1]:9753`) or a host name
/// (`localhost:9753`), with the addresses it named when the command line was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostPort {
    text: String,
    addrs: Vec<SocketAddr>,
}

impl HostPort {
    /// The addresses, in the resolver's order (an IP address: itself alone).
    pub(crate) fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Every flag that takes an address: an IP address and port, or a host name and port looked
/// up at once (a name that resolves to nothing is refused here, not at first use).
pub(crate) fn host_port(text: &str) -> Result<HostPort, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(HostPort {
            text: text.into(),
            addrs: vec![addr],
        });
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text} has no port: HOST:PORT, e.g. {text}:9753"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{port:?} is not a port (0-65535) in {text}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!(
            "{text} has no host: HOST:PORT, e.g. 127.0.0.1{text}"
        ));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host} does not resolve: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    Ok(HostPort {
        text: text.into(),
        addrs,
    })
}

/// A Kubernetes quantity of bytes above zero (`256Ki`, `1Gi`, `500M`).
pub(crate) fn positive_bytes(text: &str) -> Result<u64, String> {
    let quantity: Quantity = text.parse().map_err(|e| format!("{e}"))?;
    u64::try_from(quantity.ceil_units())
        .ok()
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{text} is not a positive number of bytes"))
}

/// `--attach-within`: `auto`, `always`, or a positive quantity of bytes.
pub(crate) fn attach_within(text: &str) -> Result<AttachWithin, String> {
    match text {
        "auto" => Ok(AttachWithin::Auto),
        "always" => Ok(AttachWithin::Always),
        _ => positive_bytes(text)
            .map(AttachWithin::Bytes)
            .map_err(|e| format!("{e}; or auto, or always")),
    }
}

/// Bytes per second: a quantity, optionally followed by `/s` (`100Mi`, `1Gi/s`).
pub(crate) fn byte_rate(text: &str) -> Result<u64, String> {
    positive_bytes(text.strip_suffix("/s").unwrap_or(text))
}

/// `--output`: for people or for programs. Each command's flag help says what its JSON holds.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    /// Aligned text for people.
    Text,
    /// JSON for programs.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked() {
        assert_eq!(positive_bytes("256Ki"), Ok(256 << 10));
        assert_eq!(positive_bytes("1Gi"), Ok(1 << 30));
        for bad in ["-1Mi", "0", "lots"] {
            assert!(positive_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(byte_rate("1Gi/s"), Ok(1 << 30));
        assert_eq!(byte_rate("100Mi"), Ok(100 << 20));
        assert_eq!(byte_rate("5000"), Ok(5000));
        assert_eq!(positive_duration("100ms"), Ok(Duration::from_millis(100)));
        assert!(positive_duration("0s").is_err());
        assert_eq!(
            positive_duration("10"),
            Err("10 has no unit: write 10s for seconds (or ms, m, h)".into()),
            "a unit is required, and named"
        );
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert!(duration("soon").unwrap_err().contains("not a Go duration"));
        assert_eq!(attach_within("auto"), Ok(AttachWithin::Auto));
        assert_eq!(attach_within("always"), Ok(AttachWithin::Always));
        assert_eq!(attach_within("2Gi"), Ok(AttachWithin::Bytes(2 << 30)));
        for bad in ["0", "never", "-1Gi", "Auto"] {
            let e = attach_within(bad).unwrap_err();
            assert!(e.ends_with("or auto, or always"), "{bad}: {e}");
        }
    }

    #[test]
    fn addresses_are_ip_or_host_name_with_a_port() {
        let ip = host_port("127.0.0.1:9753").unwrap();
        assert_eq!(
            ip.addrs(),
            ["127.0.0.1:9753".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(ip.to_string(), "127.0.0.1:9753");
        let v6 = host_port("[::1]:9753").unwrap();
        assert_eq!(v6.addrs(), ["[::1]:9753".parse::<SocketAddr>().unwrap()]);
        let name = host_port("localhost:9753").unwrap();
        assert_eq!(name.to_string(), "localhost:9753", "shown as given");
        assert!(
            name.addrs()
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 9753),
            "{name:?}"
        );
        for (bad, why) in [
            ("localhost", "has no port"),
            ("localhost:http", "is not a port"),
            ("localhost:70000", "is not a port"),
            (":9753", "has no host"),
            ("no-such-host.invalid:9753", "does not resolve"),
        ] {
            let error = host_port(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}
