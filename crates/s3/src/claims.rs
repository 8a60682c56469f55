//! The claim on a multipart upload: a completion and an abort of one upload end it one way.
//!
//! The upload's `upload` file is the claim. A completion renames it to `completing` once the
//! parts it lists check out, just before it composes, and gives it back (renames it again)
//! if composing fails; an abort deletes it before the directory. The namespace does one of
//! the two first, and the other finds no `upload` file: `NoSuchUpload`. A completion or abort
//! that finds the upload claimed waits for the claim to end; a claim held longer than
//! [`CLAIM_WAIT`] is taken for one whose gateway died, and taken over (a completion finishes
//! it, an abort removes it).

use std::time::{Duration, Instant};

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_wire::ErrorKind;

use crate::errors::{from_store, Missing};
use crate::meta::ObjectMeta;
use crate::multipart::{well_formed, UPLOAD_FILE, UPLOAD_KEY};
use crate::paths;
use crate::service::Gateway;

/// The upload file while a completion holds the claim on its upload.
pub(crate) const CLAIMED_FILE: &str = "completing";
/// How long a claim may be held before others take its holder for dead. Completing copies no
/// data: even 10,000 parts take seconds.
const CLAIM_WAIT: Duration = Duration::from_secs(30);

/// What became of an upload whose `upload` file is gone.
pub(crate) enum Claim {
    /// Completed, aborted, or never was.
    Ended,
    /// The completion that held it gave it back: the upload is open again.
    Reopened,
    /// Held by a completion for longer than [`CLAIM_WAIT`]: its gateway is taken for dead.
    /// The metadata recorded when the upload was created.
    Abandoned(Box<ObjectMeta>),
}

impl Gateway {
    /// Waits for the claim a completion holds on upload `id` of `key` (if any) to end.
    pub(crate) async fn await_claim(&self, bucket: &str, key: &str, id: &str) -> S3Result<Claim> {
        if !well_formed(id) {
            return Ok(Claim::Ended);
        }
        let claimed = format!("{}/{CLAIMED_FILE}", paths::upload_dir(bucket, id));
        let deadline = Instant::now() + CLAIM_WAIT;
        loop {
            match self.ns.object(&claimed, None).await {
                Ok((o, _)) if o.attrs.get(UPLOAD_KEY).map(String::as_str) == Some(key) => {
                    if Instant::now() >= deadline {
                        return Ok(Claim::Abandoned(Box::new(ObjectMeta::from_attrs(&o.attrs))));
                    }
                }
                Ok(_) => return Ok(Claim::Ended),
                Err(e) if e.kind == ErrorKind::NotFound => {
                    return match self.upload(bucket, key, id).await {
                        Ok(_) => Ok(Claim::Reopened),
                        Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => Ok(Claim::Ended),
                        Err(e) => Err(e),
                    };
                }
                Err(e) => return Err(from_store(e, Missing::Upload)),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn abort_multipart_upload_op(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = req.input;
        let dir = paths::upload_dir(&i.bucket, &i.upload_id);
        loop {
            match self.upload(&i.bucket, &i.key, &i.upload_id).await {
                Ok(_) => {}
                Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
                    match self.await_claim(&i.bucket, &i.key, &i.upload_id).await? {
                        Claim::Ended => return Err(e),
                        Claim::Reopened => continue,
                        // Its completion died: the abort removes what it left.
                        Claim::Abandoned(_) => break,
                    }
                }
                Err(e) => return Err(e),
            }
            // The claim: an abort ends the upload only if no completion took it first.
            match self.ns.delete(&format!("{dir}/{UPLOAD_FILE}"), false).await {
                Ok(()) => break,
                Err(e) if e.kind == ErrorKind::NotFound => continue,
                Err(e) => return Err(from_store(e, Missing::Upload)),
            }
        }
        match self.ns.delete(&dir, true).await {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(from_store(e, Missing::Upload)),
        }
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}
