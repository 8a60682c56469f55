//! Request headers the gateway does not honour and that change what a request means: refused
//! with 501 `NotImplemented` before anything is read or stored, never silently ignored (a
//! client must not believe its object is encrypted, locked, tagged or in another storage
//! class when it is not). The list is in the crate's README.

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Result};

use crate::errors::s3_err;

/// The first header of `used` that the request carries: `NotImplemented` naming it.
fn refuse(used: &[(&str, bool)]) -> S3Result<()> {
    match used.iter().find(|(_, present)| *present) {
        None => Ok(()),
        Some((header, _)) => Err(s3_err(
            S3ErrorCode::NotImplemented,
            format!("tomus does not support {header}; the request was not carried out"),
        )),
    }
}

/// Canned ACLs that change nothing here: every key may do everything, and the owner of an
/// object is the owner of its bucket.
fn acl_is_noop(acl: Option<&ObjectCannedACL>) -> bool {
    acl.is_none_or(|a| {
        matches!(
            a.as_str(),
            ObjectCannedACL::PRIVATE | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL
        )
    })
}

fn storage_class_is_standard(class: Option<&StorageClass>) -> bool {
    class.is_none_or(|c| c.as_str() == StorageClass::STANDARD)
}

/// The storage classes a PUT maps to tomus's memory class: `REDUCED_REDUNDANCY` (what S3
/// clients already offer for data that can be recomputed) and the custom class `MEMORY`.
pub(crate) fn is_memory_class(class: Option<&StorageClass>) -> bool {
    class.is_some_and(|c| {
        c.as_str() == StorageClass::REDUCED_REDUNDANCY || c.as_str().eq_ignore_ascii_case("MEMORY")
    })
}

/// The headers every object write (PUT, CopyObject, CreateMultipartUpload) may carry.
macro_rules! write_headers {
    ($i:expr) => {
        [
            (
                "x-amz-server-side-encryption",
                $i.server_side_encryption.is_some(),
            ),
            (
                "x-amz-server-side-encryption-customer-algorithm",
                $i.sse_customer_algorithm.is_some(),
            ),
            (
                "x-amz-server-side-encryption-customer-key-MD5",
                $i.sse_customer_key_md5.is_some(),
            ),
            (
                "x-amz-server-side-encryption-aws-kms-key-id",
                $i.ssekms_key_id.is_some(),
            ),
            (
                "x-amz-server-side-encryption-context",
                $i.ssekms_encryption_context.is_some(),
            ),
            (
                "x-amz-server-side-encryption-bucket-key-enabled",
                $i.bucket_key_enabled == Some(true),
            ),
            (
                "x-amz-acl (other than private)",
                !acl_is_noop($i.acl.as_ref()),
            ),
            ("x-amz-grant-full-control", $i.grant_full_control.is_some()),
            ("x-amz-grant-read", $i.grant_read.is_some()),
            ("x-amz-grant-read-acp", $i.grant_read_acp.is_some()),
            ("x-amz-grant-write-acp", $i.grant_write_acp.is_some()),
            ("x-amz-object-lock-mode", $i.object_lock_mode.is_some()),
            (
                "x-amz-object-lock-retain-until-date",
                $i.object_lock_retain_until_date.is_some(),
            ),
            (
                "x-amz-object-lock-legal-hold",
                $i.object_lock_legal_hold_status.is_some(),
            ),
            (
                "x-amz-storage-class (other than STANDARD)",
                !storage_class_is_standard($i.storage_class.as_ref()),
            ),
            ("x-amz-tagging", $i.tagging.is_some()),
            (
                "x-amz-website-redirect-location",
                $i.website_redirect_location.is_some(),
            ),
        ]
    };
}

pub(crate) fn put_object(i: &PutObjectInput) -> S3Result<()> {
    let memory = is_memory_class(i.storage_class.as_ref());
    let mut used = write_headers!(i).to_vec();
    // A PUT may ask for the memory class (the other writes keep to STANDARD).
    used.retain(|(header, _)| !(memory && header.starts_with("x-amz-storage-class")));
    refuse(&used)?;
    refuse(&[(
        "x-amz-server-side-encryption-customer-key",
        i.sse_customer_key.is_some(),
    )])
}

/// The SSE-C headers naming the key of a copy's source.
macro_rules! copy_source_key {
    ($i:expr) => {
        [
            (
                "x-amz-copy-source-server-side-encryption-customer-algorithm",
                $i.copy_source_sse_customer_algorithm.is_some(),
            ),
            (
                "x-amz-copy-source-server-side-encryption-customer-key",
                $i.copy_source_sse_customer_key.is_some(),
            ),
            (
                "x-amz-copy-source-server-side-encryption-customer-key-MD5",
                $i.copy_source_sse_customer_key_md5.is_some(),
            ),
        ]
    };
}

pub(crate) fn upload_part_copy(i: &UploadPartCopyInput) -> S3Result<()> {
    customer_key(
        i.sse_customer_algorithm.as_ref(),
        i.sse_customer_key.as_ref(),
        i.sse_customer_key_md5.as_ref(),
    )?;
    refuse(&copy_source_key!(i))
}

pub(crate) fn copy_object(i: &CopyObjectInput) -> S3Result<()> {
    refuse(&write_headers!(i))?;
    refuse(&copy_source_key!(i))?;
    refuse(&[
        (
            "x-amz-server-side-encryption-customer-key",
            i.sse_customer_key.is_some(),
        ),
        (
            "x-amz-tagging-directive: REPLACE",
            i.tagging_directive
                .as_ref()
                .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE),
        ),
    ])
}

pub(crate) fn create_multipart_upload(i: &CreateMultipartUploadInput) -> S3Result<()> {
    refuse(&write_headers!(i))?;
    refuse(&[(
        "x-amz-server-side-encryption-customer-key",
        i.sse_customer_key.is_some(),
    )])
}

/// SSE-C headers of a request on an existing object or upload (UploadPart, Complete, GET,
/// HEAD): no object here is encrypted with a customer key.
pub(crate) fn customer_key(
    algorithm: Option<&SSECustomerAlgorithm>,
    key: Option<&SSECustomerKey>,
    key_md5: Option<&SSECustomerKeyMD5>,
) -> S3Result<()> {
    refuse(&[
        (
            "x-amz-server-side-encryption-customer-algorithm",
            algorithm.is_some(),
        ),
        ("x-amz-server-side-encryption-customer-key", key.is_some()),
        (
            "x-amz-server-side-encryption-customer-key-MD5",
            key_md5.is_some(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_present_headers_are_refused() {
        assert!(refuse(&[("a", false), ("b", false)]).is_ok());
        let e = refuse(&[("a", false), ("b", true)]).unwrap_err();
        assert_eq!(*e.code(), S3ErrorCode::NotImplemented);
        assert!(e.message().unwrap_or_default().contains('b'));
    }

    #[test]
    fn harmless_values_pass() {
        assert!(acl_is_noop(None));
        assert!(acl_is_noop(Some(&ObjectCannedACL::from_static(
            ObjectCannedACL::PRIVATE
        ))));
        assert!(!acl_is_noop(Some(&ObjectCannedACL::from_static(
            ObjectCannedACL::PUBLIC_READ
        ))));
        assert!(storage_class_is_standard(Some(&StorageClass::from_static(
            StorageClass::STANDARD
        ))));
        assert!(!storage_class_is_standard(Some(
            &StorageClass::from_static(StorageClass::GLACIER)
        )));
    }

    #[test]
    fn encryption_on_put_is_refused() {
        let mut i = PutObjectInput::default();
        assert!(put_object(&i).is_ok());
        i.server_side_encryption = Some(ServerSideEncryption::from_static(
            ServerSideEncryption::AWS_KMS,
        ));
        assert!(put_object(&i).is_err());
    }
}
