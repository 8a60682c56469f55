//! `EncodingType=url` in listings: S3 then URL-encodes the key names of its response (keys,
//! prefixes, delimiters, markers), so keys with characters XML 1.0 cannot carry, and clients
//! that always ask for it (boto3, which decodes with `unquote_plus`) see keys exactly.

use s3s::dto::EncodingType;
use s3s::{S3ErrorCode, S3Result};

use crate::errors::s3_err;

/// Whether a listing request asks for URL-encoded key names (`None`: it does not);
/// `url` is the only encoding S3 knows, anything else is `InvalidArgument`.
pub(crate) fn requested(encoding: Option<&EncodingType>) -> S3Result<Option<Encoder>> {
    match encoding.map(EncodingType::as_str) {
        None => Ok(None),
        Some(e) if e.eq_ignore_ascii_case(EncodingType::URL) => Ok(Some(Encoder)),
        Some(e) => Err(s3_err(
            S3ErrorCode::InvalidArgument,
            format!("Invalid Encoding Method specified in Request: {e:?}"),
        )),
    }
}

/// URL-encodes key names as S3 does: unreserved characters (`A-Z a-z 0-9 - _ . ~`) and `/`
/// stay, a space becomes `+`, every other byte of the UTF-8 is `%XX`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Encoder;

impl Encoder {
    pub fn encode(self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for &b in s.as_bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                    out.push(char::from(b))
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    }
}

/// Applies `enc` (when the request asked for it) to an optional name.
pub(crate) fn opt(enc: Option<Encoder>, s: Option<String>) -> Option<String> {
    match enc {
        Some(e) => s.map(|s| e.encode(&s)),
        None => s,
    }
}

/// Applies `enc` (when the request asked for it) to a name.
pub(crate) fn name(enc: Option<Encoder>, s: String) -> String {
    match enc {
        Some(e) => e.encode(&s),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_encode_as_s3_does() {
        let e = Encoder;
        assert_eq!(e.encode("a%20b+c"), "a%2520b%2Bc");
        assert_eq!(e.encode("dir/a b.txt"), "dir/a+b.txt");
        assert_eq!(e.encode("Az09-_.~"), "Az09-_.~");
        assert_eq!(e.encode("é"), "%C3%A9");
        assert_eq!(e.encode("a\u{1}&<>?=#"), "a%01%26%3C%3E%3F%3D%23");
        assert_eq!(e.encode(""), "");
    }

    #[test]
    fn only_url_is_an_encoding() {
        assert!(requested(None).unwrap().is_none());
        let url = EncodingType::from_static(EncodingType::URL);
        assert!(requested(Some(&url)).unwrap().is_some());
        let other = EncodingType::from("base64".to_string());
        assert!(requested(Some(&other)).is_err());
    }

    #[test]
    fn nothing_is_encoded_unless_asked() {
        assert_eq!(name(None, "a b".into()), "a b");
        assert_eq!(name(Some(Encoder), "a b".into()), "a+b");
        assert_eq!(opt(Some(Encoder), Some("+".into())), Some("%2B".into()));
        assert_eq!(opt(Some(Encoder), None), None);
    }
}
