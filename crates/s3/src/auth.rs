//! Access keys: SigV4 signatures (headers and presigned URLs) are checked by s3s against the
//! secret of the access key a request names; unsigned requests pass only when anonymous
//! access was asked for.

use std::collections::HashMap;
use std::path::Path;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3ErrorCode, S3Result};

use crate::errors::s3_err;

/// Environment variables of the single-user case.
pub const ACCESS_KEY_ENV: &str = "TOMUS_S3_ACCESS_KEY";
pub const SECRET_KEY_ENV: &str = "TOMUS_S3_SECRET_KEY";

/// Access keys and their secrets.
#[derive(Clone, Default)]
pub struct Keys {
    secrets: HashMap<String, String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secrets.
        let mut names: Vec<&String> = self.secrets.keys().collect();
        names.sort();
        f.debug_struct("Keys").field("access_keys", &names).finish()
    }
}

impl Keys {
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Every (access key, secret) pair.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.secrets.iter().map(|(a, s)| (a.as_str(), s.as_str()))
    }

    pub fn insert(&mut self, access_key: impl Into<String>, secret: impl Into<String>) {
        self.secrets.insert(access_key.into(), secret.into());
    }

    /// Keys from a file of `ACCESS_KEY SECRET` lines (blank lines and `#` comments ignored).
    pub fn parse(text: &str) -> Result<Keys, String> {
        let mut keys = Keys::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(access), Some(secret), None) => keys.insert(access, secret),
                _ => {
                    return Err(format!(
                        "line {}: expected `ACCESS_KEY SECRET`, two words",
                        n + 1
                    ))
                }
            }
        }
        Ok(keys)
    }

    pub fn load(path: &Path) -> Result<Keys, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read keys file {}: {e}", path.display()))?;
        Keys::parse(&text).map_err(|e| format!("keys file {}: {e}", path.display()))
    }

    /// The key pair of `TOMUS_S3_ACCESS_KEY` / `TOMUS_S3_SECRET_KEY`, if both are set.
    pub fn from_env() -> Result<Keys, String> {
        let get = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let mut keys = Keys::default();
        match (get(ACCESS_KEY_ENV), get(SECRET_KEY_ENV)) {
            (Some(a), Some(s)) => keys.insert(a, s),
            (None, None) => {}
            _ => {
                return Err(format!(
                    "set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither"
                ))
            }
        }
        Ok(keys)
    }
}

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.secrets.get(access_key) {
            Some(s) => Ok(SecretKey::from(s.as_str())),
            None => Err(s3_err(
                S3ErrorCode::InvalidAccessKeyId,
                "The AWS access key Id you provided does not exist in our records.",
            )),
        }
    }
}

/// Who may call: signed requests (checked by s3s before this runs), and unsigned ones only
/// with `anonymous`.
pub struct Access {
    pub anonymous: bool,
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() || self.anonymous {
            Ok(())
        } else {
            Err(s3_err(
                S3ErrorCode::AccessDenied,
                "Access Denied: requests must be signed (start the gateway with --anonymous \
                 to allow unsigned ones)",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_parse_and_report_bad_lines() {
        let k = Keys::parse("# users\nalice s3cret\n\n  bob  other \n").unwrap();
        assert_eq!(k.len(), 2);
        assert!(format!("{k:?}").contains("alice") && !format!("{k:?}").contains("s3cret"));
        assert!(Keys::parse("alice").unwrap_err().contains("line 1"));
        assert!(Keys::parse("a b c").is_err());
    }
}
