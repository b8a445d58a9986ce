//! Who is calling: the trusted source address of a request, and key allowlists.
//!
//! The source is the socket peer, unless the peer is a trusted proxy; then it
//! is the right-most `X-Forwarded-For` entry that is not itself a trusted
//! proxy (entries to its left could have been written by anyone). A header
//! from an untrusted peer is ignored.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// The resolved source of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The address the request comes from.
    Known(IpAddr),
    /// A trusted proxy sent no usable `X-Forwarded-For`; `peer` is the proxy.
    Unknown { peer: IpAddr },
}

impl Source {
    /// The address that failed-authentication accounting is keyed on: the
    /// resolved address, or the proxy when none could be resolved.
    pub fn budget_key(&self) -> IpAddr {
        match *self {
            Source::Known(ip) | Source::Unknown { peer: ip } => ip,
        }
    }

    /// The name of the failed-authentication window of this source,
    /// `auth:<address>` as `Display` writes the address (nodes share the
    /// window by this name). Every authenticated request reads it, so an
    /// IPv4 address is written octet by octet rather than through
    /// `format!`, which cost 3.6% of a `GET /balance`.
    pub fn budget_bucket(&self) -> String {
        let ip = match self.budget_key() {
            IpAddr::V4(ip) => ip,
            v6 => return format!("auth:{v6}"),
        };
        let mut name = String::with_capacity("auth:".len() + 15);
        name.push_str("auth:");
        for (i, octet) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                name.push('.');
            }
            name.push_str(itoa::Buffer::new().format(octet));
        }
        name
    }
}

/// Resolves the source from the peer and the `X-Forwarded-For` values in the
/// order received.
pub fn resolve_source(peer: SocketAddr, forwarded_for: &[&str], trusted: &[IpNet]) -> Source {
    let peer_ip = canonical(peer.ip());
    if !is_trusted(peer_ip, trusted) {
        return Source::Known(peer_ip);
    }
    let mut hops = Vec::new();
    for value in forwarded_for {
        for entry in value.split(',') {
            match parse_hop(entry) {
                Some(ip) => hops.push(ip),
                None => return Source::Unknown { peer: peer_ip },
            }
        }
    }
    if hops.is_empty() {
        return Source::Unknown { peer: peer_ip };
    }
    // All hops trusted: the left-most is as far back as anyone vouched for.
    let client = hops
        .iter()
        .rev()
        .find(|ip| !is_trusted(**ip, trusted))
        .or(hops.first())
        .copied();
    client.map_or(Source::Unknown { peer: peer_ip }, Source::Known)
}

/// Whether `source` may use a key with this allowlist (`None`: any source).
pub fn allowed(source: &Source, allowlist: Option<&[IpNet]>) -> bool {
    match (allowlist, source) {
        (None, _) => true,
        (Some(nets), Source::Known(ip)) => nets.iter().any(|net| net.contains(ip)),
        (Some(_), Source::Unknown { .. }) => false,
    }
}

fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    trusted.iter().any(|net| net.contains(&ip))
}

/// One `X-Forwarded-For` entry: an address, optionally with a port
/// (`1.2.3.4:5`, `[::1]:5`). Anything else makes the header unusable.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    entry.parse::<SocketAddr>().ok().map(|s| canonical(s.ip()))
}

/// IPv4-mapped IPv6 addresses compare as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40000)
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn known(ip: &str) -> Source {
        Source::Known(ip.parse().unwrap())
    }

    proptest::proptest! {
        /// The window's name is the one `format!` wrote, so nodes of
        /// either build count failures in the same window.
        #[test]
        fn the_budget_window_is_named_as_formatted(octets in proptest::prelude::any::<[u8; 4]>(), segments in proptest::prelude::any::<[u16; 8]>()) {
            for ip in [IpAddr::from(octets), IpAddr::from(segments)] {
                proptest::prop_assert_eq!(Source::Known(ip).budget_bucket(), format!("auth:{ip}"));
                proptest::prop_assert_eq!(Source::Unknown { peer: ip }.budget_bucket(), format!("auth:{ip}"));
            }
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_source_whatever_it_claims() {
        let source = resolve_source(
            peer("198.51.100.9"),
            &["203.0.113.1"],
            &nets(&["10.0.0.0/8"]),
        );
        assert_eq!(source, known("198.51.100.9"));
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_hop_wins() {
        let trusted = nets(&["10.0.0.0/8"]);
        let source = resolve_source(
            peer("10.0.0.2"),
            &["1.1.1.1, 203.0.113.7, 10.0.0.5"],
            &trusted,
        );
        assert_eq!(source, known("203.0.113.7"));
        let two_headers =
            resolve_source(peer("10.0.0.2"), &["1.1.1.1", "203.0.113.8:443"], &trusted);
        assert_eq!(two_headers, known("203.0.113.8"));
    }

    #[test]
    fn a_trusted_proxy_without_a_usable_header_leaves_the_source_unknown() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert!(matches!(
            resolve_source(peer("10.0.0.2"), &[], &trusted),
            Source::Unknown { .. }
        ));
        assert!(matches!(
            resolve_source(peer("10.0.0.2"), &["not-an-ip"], &trusted),
            Source::Unknown { .. }
        ));
        assert!(matches!(
            resolve_source(peer("10.0.0.2"), &["1.2.3.4,,"], &trusted),
            Source::Unknown { .. }
        ));
    }

    #[test]
    fn mapped_ipv6_peers_compare_as_ipv4() {
        let source = resolve_source(
            peer("::ffff:10.0.0.2"),
            &["203.0.113.9"],
            &nets(&["10.0.0.0/8"]),
        );
        assert_eq!(source, known("203.0.113.9"));
    }

    #[test]
    fn allowlists_admit_inside_and_refuse_outside_or_unknown() {
        let list = nets(&["203.0.113.0/24"]);
        assert!(allowed(&known("203.0.113.200"), Some(&list)));
        assert!(!allowed(&known("203.0.114.1"), Some(&list)));
        assert!(!allowed(
            &Source::Unknown {
                peer: "10.0.0.1".parse().unwrap()
            },
            Some(&list)
        ));
        assert!(allowed(
            &Source::Unknown {
                peer: "10.0.0.1".parse().unwrap()
            },
            None
        ));
    }
}
