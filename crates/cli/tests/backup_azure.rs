//! Backup to Azure Blob storage (issue 14): the target is Azurite, Microsoft's Azure Storage
//! emulator from the npm registry (installed by scripts/emulators.sh), started by the test.
//! Three points restore exactly into fresh clusters; the same container is reachable as
//! `az://`, `azure://` and `abfs://`, with the emulator switch or a connection string, and
//! a wrong account key is refused.
//!
//! One test in this binary: it sets the Azure variables for the processes it starts.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::process::Command;

use common::backup::three_points_restore_exactly;
use common::emulators::{azure_create_container, azurite, AZURITE_ACCOUNT, AZURITE_KEY};
use common::{exe, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn points_in_azure_blob_storage_restore_exactly() {
    let Some(emu) = azurite() else { return };
    azure_create_container(&emu, "backups");
    // The only test of this binary: the servers and commands it starts inherit these.
    std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
    std::env::set_var("AZURITE_BLOB_STORAGE_URL", format!("http://{}", emu.addr));
    let url = "az://backups/cluster-a";
    let ids = three_points_restore_exactly(url, "azure").await;

    // The same points under the other schemes, and through a connection string (account,
    // key and endpoint) instead of the emulator switch; a wrong key is refused.
    let list = |url: &str, conn: Option<String>| {
        let mut cmd = Command::new(exe());
        if let Some(c) = conn {
            cmd.env_remove("AZURE_STORAGE_USE_EMULATOR")
                .env_remove("AZURITE_BLOB_STORAGE_URL")
                .env("AZURE_STORAGE_CONNECTION_STRING", c);
        }
        cmd.args(["--json", "backup", "list", "--target", url])
            .output()
            .unwrap()
    };
    let ids_of = |v: serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| p["point"].as_str().unwrap().to_string())
            .collect()
    };
    for other in ["azure://backups/cluster-a", "abfs://backups/cluster-a/"] {
        assert_eq!(ids_of(json(list(other, None))), ids, "{other}");
    }
    let conn = |key: &str| {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};\
             BlobEndpoint=http://{}/{AZURITE_ACCOUNT};",
            emu.addr
        )
    };
    assert_eq!(ids_of(json(list(url, Some(conn(AZURITE_KEY))))), ids);
    let wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==";
    let refused = list(url, Some(conn(wrong)));
    assert!(!refused.status.success(), "a wrong key listed the points");
    // Another prefix in the same container holds nothing.
    assert_eq!(
        ids_of(json(list("az://backups/elsewhere", None))),
        Vec::<String>::new()
    );
}
