//! GetObjectAttributes: what HEAD says about a version, but only the attributes the client
//! names in `x-amz-object-attributes`, and the part count of a multipart object.
//!
//! S3 lists individual parts (`Parts`) only with their additional checksums. The gateway
//! keeps an object's checksum and its part sizes, not each part's checksum, so it answers
//! `ObjectParts` with the part count and the client's markers and no `Parts` element, as S3
//! does for a multipart object uploaded without additional checksums.

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};

use crate::errors::s3_err;
use crate::meta;
use crate::paths::{self, Target};
use crate::service::Gateway;
use crate::unsupported;

/// The attributes a request asks for; `InvalidArgument` when it names none or an unknown one.
struct Wanted {
    etag: bool,
    checksum: bool,
    parts: bool,
    size: bool,
    storage_class: bool,
}

impl Wanted {
    fn parse(list: &ObjectAttributesList) -> S3Result<Wanted> {
        let mut w = Wanted {
            etag: false,
            checksum: false,
            parts: false,
            size: false,
            storage_class: false,
        };
        for a in list {
            // A client may send the attributes as one comma-separated header.
            for name in a
                .as_str()
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
            {
                match name {
                    ObjectAttributes::ETAG => w.etag = true,
                    ObjectAttributes::CHECKSUM => w.checksum = true,
                    ObjectAttributes::OBJECT_PARTS => w.parts = true,
                    ObjectAttributes::OBJECT_SIZE => w.size = true,
                    ObjectAttributes::STORAGE_CLASS => w.storage_class = true,
                    other => {
                        return Err(s3_err(
                            S3ErrorCode::InvalidArgument,
                            format!(
                                "Invalid attribute name specified: {other:?} (ETag, Checksum, \
                                 ObjectParts, StorageClass and ObjectSize are known)"
                            ),
                        ))
                    }
                }
            }
        }
        if !(w.etag || w.checksum || w.parts || w.size || w.storage_class) {
            return Err(s3_err(
                S3ErrorCode::InvalidRequest,
                "x-amz-object-attributes names no attribute",
            ));
        }
        Ok(w)
    }
}

impl Gateway {
    pub(crate) async fn get_object_attributes_op(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let i = req.input;
        unsupported::customer_key(
            i.sse_customer_algorithm.as_ref(),
            i.sse_customer_key.as_ref(),
            i.sse_customer_key_md5.as_ref(),
        )?;
        let wanted = Wanted::parse(&i.object_attributes)?;
        if let Some(max) = i.max_parts.filter(|&m| m < 0) {
            return Err(s3_err(
                S3ErrorCode::InvalidArgument,
                format!("x-amz-max-parts must not be negative (got {max})"),
            ));
        }
        if let Target::Dir(path) = paths::target(&i.bucket, &i.key)? {
            // A "folder" object: empty, written by no multipart upload.
            let created = self.find_dir(&i.bucket, &path, &i.key).await?;
            return Ok(S3Response::new(GetObjectAttributesOutput {
                e_tag: wanted
                    .etag
                    .then(|| ETag::Strong(crate::objects::EMPTY_MD5.into())),
                object_size: wanted.size.then_some(0),
                storage_class: wanted.storage_class.then(standard),
                last_modified: Some(meta::timestamp(created)),
                ..GetObjectAttributesOutput::default()
            }));
        }
        let f = self
            .find(&i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        let sums = f.meta.checksums.dto();
        let checksum = (wanted.checksum && sums != Checksum::default()).then(|| Checksum {
            checksum_type: f.meta.checksums.kind(),
            ..sums
        });
        let object_parts = match (wanted.parts, f.meta.parts) {
            (true, Some(count)) => Some(GetObjectAttributesParts {
                total_parts_count: Some(count),
                part_number_marker: i.part_number_marker,
                max_parts: Some(i.max_parts.unwrap_or(1000)),
                is_truncated: Some(false),
                ..GetObjectAttributesParts::default()
            }),
            _ => None,
        };
        Ok(S3Response::new(GetObjectAttributesOutput {
            e_tag: wanted.etag.then(|| ETag::Strong(f.etag.clone())),
            checksum,
            object_parts,
            object_size: wanted.size.then(|| f.size() as i64),
            storage_class: wanted.storage_class.then(standard),
            last_modified: Some(meta::timestamp(f.modified_ms())),
            version_id: f.version_id(),
            ..GetObjectAttributesOutput::default()
        }))
    }
}

fn standard() -> StorageClass {
    StorageClass::from_static(StorageClass::STANDARD)
}
