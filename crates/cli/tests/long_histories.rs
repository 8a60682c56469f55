//! Blobs with long histories, against real manager and provider processes: more versions,
//! and more bytes of version attributes, than one answer of the manager may carry (64 MiB).
//! Every listing still holds every version, in order, with its own attributes, and the
//! dashboard's page of the file shows the newest of them.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::sync::Arc;

use tomus_client::{Append, CommitOptions, CreateOptions};
use tomus_wire::{Attrs, Retention, MAX_ATTRS_BYTES};

use common::{free_port, http_get, TestCluster};

/// Versions appended: their attributes alone are more than 64 MiB.
const VERSIONS: usize = 4_200;
const WRITERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_version_of_a_long_history_is_listed_with_its_attributes() {
    let http = format!("127.0.0.1:{}", free_port());
    let tc = TestCluster::start_with(2, |spec| {
        spec.manager_args = vec!["--http-addr".into(), http.clone()];
    });
    let client = Arc::new(tc.client().await);
    let options = CreateOptions {
        chunk_size: 64 << 10,
        ..CreateOptions::default()
    };
    // Kept whole: files of the namespace otherwise keep only their last versions.
    let (_, blob) = client
        .namespace()
        .create_retained("long", options, Retention::KeepAll)
        .await
        .unwrap();
    let info = client.blob_info(blob.id()).await.unwrap();

    // Each append carries the byte it appends as an attribute, padded to the largest
    // attributes a version may have.
    let pad = "p".repeat(MAX_ATTRS_BYTES - 64);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (client, pad, info) = (client.clone(), pad.clone(), info.clone());
        writers.push(tokio::spawn(async move {
            let blob = client.blob(&info);
            for i in (w..VERSIONS).step_by(WRITERS) {
                let byte = (i % 251) as u8;
                let attrs: Attrs = [
                    ("byte".to_string(), byte.to_string()),
                    ("pad".into(), pad.clone()),
                ]
                .into_iter()
                .collect();
                let options = CommitOptions {
                    attrs,
                    expect_size: None,
                };
                let mut writer = blob.writer();
                writer.write(&[byte]).await.unwrap();
                writer.commit(Append, &options).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }

    let listed = blob.versions_attrs().await.unwrap();
    let numbers: Vec<u64> = listed.iter().map(|(v, _)| v.version).collect();
    assert!(
        numbers == (1..=VERSIONS as u64).collect::<Vec<_>>(),
        "{} versions listed, from {:?} to {:?}",
        numbers.len(),
        numbers.first(),
        numbers.last()
    );
    // The version that made the blob `size` bytes long appended its last byte.
    let content = blob.read(0, VERSIONS as u64, None).await.unwrap();
    for (v, attrs) in &listed {
        let byte = content[v.size as usize - 1];
        assert_eq!(attrs["byte"], byte.to_string(), "version {}", v.version);
        assert_eq!(attrs["pad"].len(), pad.len());
    }

    let plain = blob.versions().await.unwrap();
    assert!(plain.versions.iter().eq(listed.iter().map(|(v, _)| v)));
    assert!(plain.aborted.is_empty());

    // The dashboard shows the newest 1,000 versions, newest first, and says where the rest is.
    let page = http_get(&http, "/file?path=long");
    assert!(page.starts_with("HTTP/1.1 200"), "{}", &page[..200]);
    let rows: Vec<&str> = page.split("<tr class=\"version\">").skip(1).collect();
    assert_eq!(rows.len(), 1000);
    let newest = format!("<td class=\"num\">{VERSIONS}</td>");
    assert!(rows[0].starts_with(&newest), "{}", rows[0]);
    let oldest = format!("<td class=\"num\">{}</td>", VERSIONS - 999);
    assert!(rows[999].starts_with(&oldest), "{}", rows[999]);
    let older = format!("<code>tomus blob versions {}</code>", blob.id());
    assert!(page.contains("id=\"older\"") && page.contains(&older));
}
