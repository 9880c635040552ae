//! The SSRF guard: URLs the service fetches (inputs) or posts to (callbacks) must not
//! reach loopback, private, link-local, shared, documentation, multicast or metadata
//! addresses, IPv4-mapped IPv6 included, unless the deployment allows private targets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest URL the service accepts to connect to (inputs and `callback_url`) or keeps.
pub const MAX_URL_CHARS: usize = 2_048;

/// Whether an address is one the service must not reach on a caller's behalf.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => forbidden_v4(v4),
            None => forbidden_v6(v6),
        },
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // includes 169.254.169.254, the metadata service
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (carrier-grade NAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || first == 0x2001 && ip.segments()[1] == 0x0db8 // documentation
        || ip.to_ipv4().is_some_and(forbidden_v4) // IPv4-compatible
        || ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && forbidden_v4(Ipv4Addr::from(
            ((ip.segments()[6] as u32) << 16) | ip.segments()[7] as u32,
        )) // NAT64 of a forbidden IPv4
}

/// Addresses the guard lets through although they are forbidden: set only by tests (a
/// local page standing in for a public one, with the guard on); nothing in a
/// deployment's configuration reaches it.
static EXCEPTIONS: std::sync::RwLock<Vec<std::net::SocketAddr>> = std::sync::RwLock::new(Vec::new());

/// Lets the guard through to `address` (tests only; see [`EXCEPTIONS`]).
pub fn except_for_tests(address: std::net::SocketAddr) {
    EXCEPTIONS.write().unwrap_or_else(|poisoned| poisoned.into_inner()).push(address);
}

fn is_excepted(address: &std::net::SocketAddr) -> bool {
    EXCEPTIONS.read().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(address)
}

/// Checks a URL's host: a literal address must be allowed, and a name must resolve only
/// to allowed addresses. Returns the addresses to connect to (so that a second lookup
/// cannot swap them), or why the URL is refused.
pub async fn resolve_allowed(url: &url::Url, allow_private: bool) -> Result<Vec<std::net::SocketAddr>, String> {
    let host = url.host_str().ok_or_else(|| format!("{url} has no host"))?;
    let port = url.port_or_known_default().ok_or_else(|| format!("{url} has no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<std::net::SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![(ip, port).into()],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|error| format!("the host {host} could not be resolved: {error}"))?
            .collect(),
    };
    if addresses.is_empty() {
        return Err(format!("the host {host} has no address"));
    }
    if !allow_private {
        if let Some(address) = addresses.iter().find(|address| is_forbidden(address.ip()) && !is_excepted(address)) {
            return Err(format!(
                "the host {host} resolves to {}, a private or reserved address this service does not connect to",
                address.ip()
            ));
        }
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_forbidden() {
        for text in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "192.0.2.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "2001:db8::1",
            "64:ff9b::a00:1",
        ] {
            assert!(is_forbidden(text.parse().unwrap()), "{text}");
        }
        for text in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(!is_forbidden(text.parse().unwrap()), "{text}");
        }
    }

    #[tokio::test]
    async fn literal_private_hosts_are_refused_unless_allowed() {
        let url = url::Url::parse("http://127.0.0.1:9/x").unwrap();
        assert!(resolve_allowed(&url, false).await.unwrap_err().contains("private"));
        assert_eq!(resolve_allowed(&url, true).await.unwrap().len(), 1);
        let url = url::Url::parse("http://[::ffff:10.0.0.1]/x").unwrap();
        assert!(resolve_allowed(&url, false).await.is_err());
    }
}
