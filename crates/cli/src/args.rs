//! Argument parsers the subcommands share.

use oxrdma::Mtu;

/// Parses `-m`: a path MTU in bytes.
pub fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| "-m must be 256, 512, 1024, 2048 or 4096".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus_parse_from_their_byte_counts_only() {
        assert_eq!(parse_mtu("256"), Ok(Mtu::Mtu256));
        assert_eq!(parse_mtu("4096"), Ok(Mtu::Mtu4096));
        for bad in ["1000", "0", "8192", "x", ""] {
            assert!(parse_mtu(bad).unwrap_err().contains("must be 256"), "{bad}");
        }
    }
}
