//! Flexible checksums (`x-amz-checksum-crc32|crc32c|crc64nvme|sha1|sha256`): a write that
//! declares one, in a header or in the trailer of an `aws-chunked` body, has it computed over
//! the bytes as they stream in and is refused (`BadDigest`, nothing committed) when it
//! differs; one named only by `x-amz-sdk-checksum-algorithm` or `x-amz-trailer` is computed
//! and kept. The values are attributes of the version, returned by PUT, by GET and HEAD with
//! `x-amz-checksum-mode: ENABLED`, and combined into S3's composite checksum
//! (`checksum-of-checksums-N`) by a multipart completion.

use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::{Checksum, ChecksumAlgorithm, ChecksumType};
use s3s::{S3ErrorCode, S3Result};
use tomus_wire::Attrs;

use crate::errors::s3_err;

/// The checksums a write's input (PutObject, UploadPart) declares in its headers, moved
/// out of it.
macro_rules! declared_checksums {
    ($i:expr) => {
        s3s::dto::Checksum {
            checksum_crc32: $i.checksum_crc32,
            checksum_crc32c: $i.checksum_crc32c,
            checksum_crc64nvme: $i.checksum_crc64nvme,
            checksum_sha1: $i.checksum_sha1,
            checksum_sha256: $i.checksum_sha256,
            ..s3s::dto::Checksum::default()
        }
    };
}
pub(crate) use declared_checksums;

/// A checksum algorithm S3 offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Alg {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

const ALL: [Alg; 5] = [
    Alg::Crc32,
    Alg::Crc32c,
    Alg::Crc64Nvme,
    Alg::Sha1,
    Alg::Sha256,
];
const TYPE_ATTR: &str = "s3:checksum-type";

impl Alg {
    fn name(self) -> &'static str {
        match self {
            Alg::Crc32 => ChecksumAlgorithm::CRC32,
            Alg::Crc32c => ChecksumAlgorithm::CRC32C,
            Alg::Crc64Nvme => ChecksumAlgorithm::CRC64NVME,
            Alg::Sha1 => ChecksumAlgorithm::SHA1,
            Alg::Sha256 => ChecksumAlgorithm::SHA256,
        }
    }

    /// The request and response header (and trailer) carrying its value.
    fn header(self) -> String {
        format!("x-amz-checksum-{}", self.name().to_ascii_lowercase())
    }

    fn attr(self) -> String {
        format!("s3:checksum-{}", self.name().to_ascii_lowercase())
    }

    fn parse(name: &str) -> S3Result<Alg> {
        ALL.into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                s3_err(
                    S3ErrorCode::InvalidRequest,
                    format!("Checksum algorithm {name} is not supported"),
                )
            })
    }

    fn of(dto: &Checksum, alg: Alg) -> Option<&String> {
        match alg {
            Alg::Crc32 => dto.checksum_crc32.as_ref(),
            Alg::Crc32c => dto.checksum_crc32c.as_ref(),
            Alg::Crc64Nvme => dto.checksum_crc64nvme.as_ref(),
            Alg::Sha1 => dto.checksum_sha1.as_ref(),
            Alg::Sha256 => dto.checksum_sha256.as_ref(),
        }
    }

    /// The base64 digest of `data`.
    fn digest(self, data: &[u8]) -> String {
        let mut h = hasher(&[self]);
        h.update(data);
        Alg::of(&h.finalize(), self).cloned().unwrap_or_default()
    }
}

fn hasher(algs: &[Alg]) -> ChecksumHasher {
    let mut h = ChecksumHasher::default();
    for a in algs {
        match a {
            Alg::Crc32 => h.crc32 = Some(Crc32::new()),
            Alg::Crc32c => h.crc32c = Some(Crc32c::new()),
            Alg::Crc64Nvme => h.crc64nvme = Some(Crc64Nvme::new()),
            Alg::Sha1 => h.sha1 = Some(Sha1::new()),
            Alg::Sha256 => h.sha256 = Some(Sha256::new()),
        }
    }
    h
}

/// The checksums of a version (base64), whole-object or composite.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checksums {
    pub values: Vec<(Alg, String)>,
    /// Combined from a multipart upload's parts (`checksum-of-checksums-N`).
    pub composite: bool,
}

impl Checksums {
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn get(&self, alg: Alg) -> Option<&String> {
        self.values.iter().find(|(a, _)| *a == alg).map(|(_, v)| v)
    }

    pub fn from_attrs(attrs: &Attrs) -> Checksums {
        Checksums {
            values: ALL
                .into_iter()
                .filter_map(|a| Some((a, attrs.get(&a.attr())?.clone())))
                .collect(),
            composite: attrs.get(TYPE_ATTR).map(String::as_str) == Some(ChecksumType::COMPOSITE),
        }
    }

    pub fn add_to(&self, attrs: &mut Attrs) {
        for (a, v) in &self.values {
            attrs.insert(a.attr(), v.clone());
        }
        if self.composite {
            attrs.insert(TYPE_ATTR.into(), ChecksumType::COMPOSITE.into());
        }
    }

    /// Whether every value `given` names is the one kept (none named: true).
    pub fn matches(&self, given: &Checksum) -> bool {
        ALL.into_iter().all(|a| match Alg::of(given, a) {
            Some(v) => self.get(a) == Some(v),
            None => true,
        })
    }

    /// As S3's DTO, for responses.
    pub fn dto(&self) -> Checksum {
        let get = |a| self.get(a).cloned();
        Checksum {
            checksum_crc32: get(Alg::Crc32),
            checksum_crc32c: get(Alg::Crc32c),
            checksum_crc64nvme: get(Alg::Crc64Nvme),
            checksum_sha1: get(Alg::Sha1),
            checksum_sha256: get(Alg::Sha256),
            ..Checksum::default()
        }
    }

    /// The `x-amz-checksum-type` to answer with, when there is a checksum.
    pub fn kind(&self) -> Option<ChecksumType> {
        (!self.is_empty()).then(|| {
            ChecksumType::from_static(if self.composite {
                ChecksumType::COMPOSITE
            } else {
                ChecksumType::FULL_OBJECT
            })
        })
    }

    /// The checksum of an object made of `parts` (each with its checksums and length), for
    /// every algorithm all of them have. `full_object` (asked for when the upload was
    /// created, and the only kind CRC64NVME has) combines the parts' CRCs into the CRC of the
    /// whole content, as if computed over it; otherwise S3's composite
    /// `checksum-of-checksums-N` (CRC32, CRC32C, SHA-1, SHA-256).
    pub fn of_parts(parts: &[(Checksums, u64)], full_object: bool) -> Checksums {
        if parts.is_empty() {
            return Checksums::default();
        }
        let mut values = Vec::new();
        let crcs = [Alg::Crc32, Alg::Crc32c, Alg::Crc64Nvme];
        for alg in crcs
            .into_iter()
            .filter(|a| full_object || *a == Alg::Crc64Nvme)
        {
            if let Some(v) = combine_crcs(alg, parts) {
                values.push((alg, v));
            }
        }
        if !values.is_empty() {
            return Checksums {
                values,
                composite: false,
            };
        }
        for alg in [Alg::Crc32, Alg::Crc32c, Alg::Sha1, Alg::Sha256] {
            let mut raw = Vec::new();
            let complete = parts.iter().all(|(p, _)| {
                p.get(alg)
                    .and_then(|v| base64_simd::STANDARD.decode_to_vec(v).ok())
                    .map(|bytes| raw.extend_from_slice(&bytes))
                    .is_some()
            });
            if complete {
                values.push((alg, format!("{}-{}", alg.digest(&raw), parts.len())));
            }
        }
        Checksums {
            values,
            composite: true,
        }
    }
}

/// The CRC `alg` of the concatenation of `parts`, from theirs (base64, big-endian).
fn combine_crcs(alg: Alg, parts: &[(Checksums, u64)]) -> Option<String> {
    let (algorithm, width) = match alg {
        Alg::Crc32 => (crc_fast::CrcAlgorithm::Crc32IsoHdlc, 4),
        Alg::Crc32c => (crc_fast::CrcAlgorithm::Crc32Iscsi, 4),
        Alg::Crc64Nvme => (crc_fast::CrcAlgorithm::Crc64Nvme, 8),
        Alg::Sha1 | Alg::Sha256 => return None,
    };
    let mut whole: Option<u64> = None;
    for (sums, len) in parts {
        let bytes = base64_simd::STANDARD.decode_to_vec(sums.get(alg)?).ok()?;
        if bytes.len() != width {
            return None;
        }
        let crc = bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        whole = Some(match whole {
            None => crc,
            Some(w) => crc_fast::checksum_combine(algorithm, w, crc, *len),
        });
    }
    let be = whole?.to_be_bytes();
    Some(base64_simd::STANDARD.encode_to_string(&be[8 - width..]))
}

/// Checks a write's checksums as its body streams in.
pub struct Verifier {
    hasher: ChecksumHasher,
    algs: Vec<Alg>,
    declared: Checksum,
    /// Algorithms whose values come in the body's trailer.
    trailed: Vec<Alg>,
}

impl Verifier {
    /// For a write declaring `declared` (the `x-amz-checksum-*` headers), naming `algorithm`
    /// (`x-amz-sdk-checksum-algorithm`), with request `headers` (for `x-amz-trailer`).
    pub fn new(
        declared: Checksum,
        algorithm: Option<&ChecksumAlgorithm>,
        headers: &http::HeaderMap,
    ) -> S3Result<Verifier> {
        let mut algs: Vec<Alg> = ALL
            .into_iter()
            .filter(|a| Alg::of(&declared, *a).is_some())
            .collect();
        if let Some(a) = algorithm {
            algs.push(Alg::parse(a.as_str())?);
        }
        let mut trailed = Vec::new();
        for name in headers
            .get_all("x-amz-trailer")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
        {
            let name = name.trim().to_ascii_lowercase();
            if let Some(alg) = name.strip_prefix("x-amz-checksum-") {
                let alg = Alg::parse(alg)?;
                trailed.push(alg);
                algs.push(alg);
            }
        }
        algs.sort();
        algs.dedup();
        Ok(Verifier {
            hasher: hasher(&algs),
            algs,
            declared,
            trailed,
        })
    }

    pub fn update(&mut self, data: &[u8]) {
        if !self.algs.is_empty() {
            self.hasher.update(data);
        }
    }

    /// The computed checksums, once every declared one (in the headers or in `trailers`,
    /// the body's trailing headers) matched; `BadDigest` otherwise.
    pub fn finish(self, trailers: Option<&http::HeaderMap>) -> S3Result<Checksums> {
        let computed = self.hasher.finalize();
        let mut values = Vec::new();
        for alg in self.algs {
            let Some(mine) = Alg::of(&computed, alg) else {
                continue;
            };
            let trailed = self
                .trailed
                .contains(&alg)
                .then(|| {
                    trailers?
                        .get(alg.header())?
                        .to_str()
                        .ok()
                        .map(str::to_string)
                })
                .flatten();
            for given in Alg::of(&self.declared, alg)
                .into_iter()
                .chain(trailed.as_ref())
            {
                if given.trim() != mine {
                    return Err(s3_err(
                        S3ErrorCode::BadDigest,
                        format!(
                            "The {} you specified did not match the calculated checksum.",
                            alg.name()
                        ),
                    ));
                }
            }
            values.push((alg, mine.clone()));
        }
        Ok(Checksums {
            values,
            composite: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_checksums_are_checked() {
        let crc = Alg::Crc32.digest(b"hello");
        let declared = Checksum {
            checksum_crc32: Some(crc.clone()),
            ..Checksum::default()
        };
        let mut v = Verifier::new(declared.clone(), None, &http::HeaderMap::new()).unwrap();
        v.update(b"hel");
        v.update(b"lo");
        let sums = v.finish(None).unwrap();
        assert_eq!(sums.get(Alg::Crc32), Some(&crc));
        let mut v = Verifier::new(declared, None, &http::HeaderMap::new()).unwrap();
        v.update(b"hellO");
        let e = v.finish(None).unwrap_err();
        assert_eq!(e.code(), &S3ErrorCode::BadDigest);
    }

    #[test]
    fn trailer_checksums_are_checked() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-amz-trailer", "x-amz-checksum-sha256".parse().unwrap());
        let good = Alg::Sha256.digest(b"data");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-amz-checksum-sha256", good.parse().unwrap());
        let mut v = Verifier::new(Checksum::default(), None, &headers).unwrap();
        v.update(b"data");
        assert_eq!(
            v.finish(Some(&trailers)).unwrap().get(Alg::Sha256),
            Some(&good)
        );
        let mut v = Verifier::new(Checksum::default(), None, &headers).unwrap();
        v.update(b"datA");
        assert!(v.finish(Some(&trailers)).is_err());
    }

    #[test]
    fn full_object_crcs_are_combined_from_the_parts() {
        let bodies = [b"hello ".as_slice(), b"multipart ", b"world"];
        for alg in [Alg::Crc32, Alg::Crc32c, Alg::Crc64Nvme] {
            let parts: Vec<(Checksums, u64)> = bodies
                .iter()
                .map(|b| {
                    let sums = Checksums {
                        values: vec![(alg, alg.digest(b))],
                        composite: false,
                    };
                    (sums, b.len() as u64)
                })
                .collect();
            let c = Checksums::of_parts(&parts, true);
            assert_eq!(
                c.get(alg),
                Some(&alg.digest(b"hello multipart world")),
                "{alg:?}"
            );
            assert!(!c.composite);
        }
    }

    #[test]
    fn composite_is_the_checksum_of_the_parts_checksums() {
        let parts: Vec<(Checksums, u64)> = [b"ab".as_slice(), b"cd"]
            .iter()
            .map(|p| {
                let sums = Checksums {
                    values: vec![(Alg::Crc32, Alg::Crc32.digest(p))],
                    composite: false,
                };
                (sums, 2)
            })
            .collect();
        let mut raw = Vec::new();
        for p in [b"ab".as_slice(), b"cd"] {
            let d = Alg::Crc32.digest(p);
            raw.extend(base64_simd::STANDARD.decode_to_vec(&d).unwrap());
        }
        let c = Checksums::of_parts(&parts, false);
        assert_eq!(
            c.get(Alg::Crc32),
            Some(&format!("{}-2", Alg::Crc32.digest(&raw)))
        );
        assert_eq!(c.get(Alg::Sha256), None);
        let mut attrs = Attrs::new();
        c.add_to(&mut attrs);
        assert_eq!(Checksums::from_attrs(&attrs), c);
    }
}
