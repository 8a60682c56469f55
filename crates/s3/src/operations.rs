//! Which S3 operation a request is, from its method, path and query alone: the label of the
//! gateway's metrics (`tomus_s3_requests_total{operation, status}`). Path-style requests
//! (`/bucket/key`), as the gateway serves them; an unrecognized shape is `Other`.

/// The operation of a request to `path?query` with `method` (`copy`: it has an
/// `x-amz-copy-source` header).
pub fn operation(method: &http::Method, path: &str, query: &str, copy: bool) -> &'static str {
    use http::Method as M;
    let has = |key: &str| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some(key))
    };
    let trimmed = path.trim_start_matches('/');
    let (bucket, key) = match trimmed.split_once('/') {
        Some((b, k)) => (b, k),
        None => (trimmed, ""),
    };
    if bucket.is_empty() {
        return if *method == M::GET {
            "ListBuckets"
        } else {
            "Other"
        };
    }
    if key.is_empty() {
        return match *method {
            M::GET if has("versions") => "ListObjectVersions",
            M::GET if has("uploads") => "ListMultipartUploads",
            M::GET if has("location") => "GetBucketLocation",
            M::GET if has("versioning") => "GetBucketVersioning",
            M::GET if has("list-type") => "ListObjectsV2",
            M::GET => "ListObjects",
            M::HEAD => "HeadBucket",
            M::PUT if has("versioning") => "PutBucketVersioning",
            M::PUT => "CreateBucket",
            M::DELETE => "DeleteBucket",
            M::POST if has("delete") => "DeleteObjects",
            _ => "Other",
        };
    }
    match *method {
        M::GET if has("uploadId") => "ListParts",
        M::GET if has("tagging") => "GetObjectTagging",
        M::GET if has("attributes") => "GetObjectAttributes",
        M::GET => "GetObject",
        M::HEAD => "HeadObject",
        M::PUT if has("uploadId") && copy => "UploadPartCopy",
        M::PUT if has("uploadId") => "UploadPart",
        M::PUT if has("tagging") => "PutObjectTagging",
        M::PUT if copy => "CopyObject",
        M::PUT => "PutObject",
        M::DELETE if has("uploadId") => "AbortMultipartUpload",
        M::DELETE => "DeleteObject",
        M::POST if has("uploads") => "CreateMultipartUpload",
        M::POST if has("uploadId") => "CompleteMultipartUpload",
        _ => "Other",
    }
}

#[cfg(test)]
mod tests {
    use super::operation;
    use http::Method;

    #[test]
    fn names_the_common_operations() {
        let cases = [
            (Method::GET, "/", "", false, "ListBuckets"),
            (
                Method::GET,
                "/b",
                "list-type=2&prefix=x",
                false,
                "ListObjectsV2",
            ),
            (Method::GET, "/b/", "versions", false, "ListObjectVersions"),
            (Method::PUT, "/b", "", false, "CreateBucket"),
            (Method::PUT, "/b/k/x", "", false, "PutObject"),
            (Method::PUT, "/b/k", "", true, "CopyObject"),
            (
                Method::PUT,
                "/b/k",
                "partNumber=1&uploadId=u",
                false,
                "UploadPart",
            ),
            (
                Method::POST,
                "/b/k",
                "uploads",
                false,
                "CreateMultipartUpload",
            ),
            (
                Method::POST,
                "/b/k",
                "uploadId=u",
                false,
                "CompleteMultipartUpload",
            ),
            (Method::POST, "/b", "delete", false, "DeleteObjects"),
            (Method::GET, "/b/k", "", false, "GetObject"),
            (
                Method::GET,
                "/b/k",
                "attributes&versionId=3.1",
                false,
                "GetObjectAttributes",
            ),
            (Method::HEAD, "/b/k", "", false, "HeadObject"),
            (Method::DELETE, "/b/k", "", false, "DeleteObject"),
            (Method::PATCH, "/b/k", "", false, "Other"),
        ];
        for (method, path, query, copy, want) in cases {
            assert_eq!(
                operation(&method, path, query, copy),
                want,
                "{method} {path}?{query}"
            );
        }
    }
}
