//! The source address of a request (`domain::net::resolve_source`) and key
//! allowlists (`domain::net::allowed`), with any `X-Forwarded-For` values and
//! any trusted-proxy and allowlist CIDRs.
//!
//! The input is newline-framed so a corpus can hold real headers:
//! `peer \n trusted CIDRs \n allowlist \n X-Forwarded-For value \n ...`,
//! the peer an address with an optional port, the lists space-separated, an
//! allowlist of `-` meaning none, and each further line one header value.
//! Trusted proxies are read with ipnet's parser, as `http.trusted_proxies`
//! is; allowlist entries also as bare addresses, the operator API's rule.
//!
//! - Neither function panics.
//! - The result is the documented rule, checked against a plain model: an
//!   untrusted peer is the source whatever the header says; behind a trusted
//!   peer the source is the right-most hop that is not a trusted proxy, the
//!   left-most if all are, and unknown if there is no hop or any entry is not
//!   an address (with an optional port).
//! - IPv4-mapped IPv6 addresses never come out: they compare as IPv4.
//! - `allowed` admits any source without a list, never an unknown source with
//!   one, and a known source exactly when a listed network contains it.
#![no_main]

use std::net::{IpAddr, SocketAddr};

use esim_reseller::domain::net::{Source, allowed, resolve_source};
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The documented rule, written plainly.
fn model(peer: IpAddr, forwarded_for: &[&str], trusted: &[IpNet]) -> Source {
    let peer = canonical(peer);
    let trusted_ip = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !trusted_ip(&peer) {
        return Source::Known(peer);
    }
    let mut hops = Vec::new();
    for entry in forwarded_for.iter().flat_map(|v| v.split(',')) {
        let entry = entry.trim();
        let Some(ip) = entry
            .parse::<IpAddr>()
            .ok()
            .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        else {
            return Source::Unknown { peer };
        };
        hops.push(canonical(ip));
    }
    match (hops.iter().rev().find(|ip| !trusted_ip(ip)), hops.first()) {
        (Some(ip), _) | (None, Some(ip)) => Source::Known(*ip),
        (None, None) => Source::Unknown { peer },
    }
}

fn peer(text: &str) -> Option<SocketAddr> {
    text.parse::<SocketAddr>().ok().or_else(|| {
        text.parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, 40000))
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let Some(peer) = lines.next().and_then(peer) else {
        return;
    };
    let trusted: Vec<IpNet> = lines
        .next()
        .unwrap_or_default()
        .split(' ')
        .filter_map(|s| s.parse::<IpNet>().ok())
        .collect();
    let list: Option<Vec<IpNet>> = match lines.next().unwrap_or("-") {
        "-" => None,
        entries => Some(
            entries
                .split(' ')
                .filter_map(|entry| {
                    entry
                        .parse::<IpNet>()
                        .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                        .ok()
                })
                .collect(),
        ),
    };
    let forwarded_for: Vec<&str> = lines.collect();

    let source = resolve_source(peer, &forwarded_for, &trusted);
    assert_eq!(source, model(peer.ip(), &forwarded_for, &trusted));
    let ip = source.budget_key();
    assert_eq!(canonical(ip), ip, "{ip} is IPv4-mapped");
    if let Source::Unknown { peer: proxy } = source {
        assert_eq!(proxy, canonical(peer.ip()));
    }

    assert!(allowed(&source, None));
    if let Some(list) = &list {
        let expected = match source {
            Source::Known(ip) => list.iter().any(|n| n.contains(&ip)),
            Source::Unknown { .. } => false,
        };
        assert_eq!(allowed(&source, Some(list)), expected);
    }
});
