//! Azure Blob and Google Cloud Storage targets: the `object_store` store for an `az://` or
//! `gs://` URL, configured from the environment the way each cloud's own tools are.
//!
//! - `az://container/prefix` (also `azure://`, `adl://`, `abfs[s]://container/prefix` and
//!   `abfs[s]://container@account.dfs.core.windows.net/prefix`): the account and its key
//!   from `AZURE_STORAGE_ACCOUNT_NAME` and `AZURE_STORAGE_ACCOUNT_KEY` (or the Azure CLI's
//!   `AZURE_STORAGE_ACCOUNT` and `AZURE_STORAGE_KEY`), or a connection string in
//!   `AZURE_STORAGE_CONNECTION_STRING`; every other `AZURE_*` variable `object_store` knows
//!   (SAS token, service principal, federated token file, managed identity) also applies.
//!   `AZURE_STORAGE_ENDPOINT` names another endpoint; `AZURE_STORAGE_USE_EMULATOR=true`
//!   talks to Azurite at `AZURITE_BLOB_STORAGE_URL` (default `http://127.0.0.1:10000`)
//!   with its well-known development account.
//! - `gs://bucket/prefix`: a service account key file in `GOOGLE_SERVICE_ACCOUNT` or
//!   `GOOGLE_APPLICATION_CREDENTIALS` (or its JSON in `GOOGLE_SERVICE_ACCOUNT_KEY`), else
//!   gcloud's application default credentials, else the instance metadata server.
//!   `STORAGE_EMULATOR_HOST` (the variable Google's own client libraries read) points at
//!   an emulator such as fake-gcs-server, without OAuth.
//!
//! An `http://` endpoint is allowed when it is named explicitly (a local emulator).

use std::sync::Arc;

use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use tomus_wire::{Error, Result};

/// URL schemes that name an Azure Blob container (as `object_store` parses them).
pub const AZURE_SCHEMES: [&str; 5] = ["az", "azure", "adl", "abfs", "abfss"];

/// The container or bucket part of `url` (`scheme://authority/prefix`) and the prefix,
/// without leading or trailing `/`.
fn split(url: &str, scheme: &str) -> (String, String) {
    let rest = &url[scheme.len() + 3..];
    let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    (authority.to_string(), prefix.trim_matches('/').to_string())
}

/// The Azure Blob store named by `url` (whose scheme is `scheme`), and its prefix.
pub fn azure(
    url: &str,
    scheme: &str,
    retry: RetryConfig,
) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (authority, prefix) = split(url, scheme);
    if authority.is_empty() {
        return Err(Error::invalid(format!(
            "{url}: name a container (az://container/prefix)"
        )));
    }
    let mut builder = MicrosoftAzureBuilder::from_env().with_retry(retry);
    // The Azure CLI's names for the account and its key, which object_store does not read.
    for (var, key) in [
        ("AZURE_STORAGE_ACCOUNT", AzureConfigKey::AccountName),
        ("AZURE_STORAGE_KEY", AzureConfigKey::AccessKey),
    ] {
        if builder.get_config_value(&key).is_none() {
            if let Ok(v) = std::env::var(var) {
                builder = builder.with_config(key, v);
            }
        }
    }
    if let Ok(text) = std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        for (key, value) in connection_string(&text)? {
            builder = builder.with_config(key, value);
        }
    }
    if let Some(endpoint) = builder.get_config_value(&AzureConfigKey::Endpoint) {
        if endpoint.starts_with("http://") {
            builder = builder.with_allow_http(true);
        }
    }
    // object_store reads the container (and, for abfs URLs naming one, the account) from
    // the URL; the prefix is ours.
    let store = builder
        .with_url(format!("{scheme}://{authority}"))
        .build()
        .map_err(|e| Error::invalid(format!("{url}: {e}")))?;
    Ok((Arc::new(store), prefix))
}

/// The settings an Azure Storage connection string gives (`Key=Value;...`, as the Azure
/// portal and Azurite print them): account, key, SAS token, blob endpoint, or the
/// emulator (`UseDevelopmentStorage=true`).
pub fn connection_string(text: &str) -> Result<Vec<(AzureConfigKey, String)>> {
    let mut out = Vec::new();
    let (mut protocol, mut suffix, mut account) = (None, None, None);
    let mut endpoint = None;
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            return Err(Error::invalid(format!(
                "AZURE_STORAGE_CONNECTION_STRING: {part:?} is not Key=Value"
            )));
        };
        let v = v.trim().to_string();
        match k.trim() {
            "AccountName" => {
                account = Some(v.clone());
                out.push((AzureConfigKey::AccountName, v));
            }
            "AccountKey" => out.push((AzureConfigKey::AccessKey, v)),
            "SharedAccessSignature" => out.push((AzureConfigKey::SasKey, v)),
            "BlobEndpoint" => endpoint = Some(v),
            "DefaultEndpointsProtocol" => protocol = Some(v),
            "EndpointSuffix" => suffix = Some(v),
            "UseDevelopmentStorage" => out.push((AzureConfigKey::UseEmulator, v)),
            // Queue, table and file endpoints are not ours to use.
            _ => {}
        }
    }
    // Without an explicit blob endpoint, one in another cloud is named by its suffix.
    let endpoint = endpoint.or_else(|| {
        let (account, suffix) = (account?, suffix?);
        let protocol = protocol.unwrap_or_else(|| "https".into());
        Some(format!("{protocol}://{account}.blob.{suffix}"))
    });
    if let Some(e) = endpoint {
        out.push((AzureConfigKey::Endpoint, e));
    }
    Ok(out)
}

/// The GCS store for `gs://bucket/prefix`, and its prefix.
pub fn gcs(url: &str, retry: RetryConfig) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (bucket, prefix) = split(url, "gs");
    if bucket.is_empty() {
        return Err(Error::invalid(format!("{url}: no bucket named")));
    }
    let mut builder = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry);
    if let Some(host) = std::env::var("STORAGE_EMULATOR_HOST")
        .ok()
        .filter(|h| !h.is_empty())
    {
        let named = [
            GoogleConfigKey::ServiceAccount,
            GoogleConfigKey::ServiceAccountKey,
        ]
        .iter()
        .any(|k| builder.get_config_value(k).is_some());
        if named {
            return Err(Error::invalid(format!(
                "{url}: STORAGE_EMULATOR_HOST and a service account are both given; an \
                 emulator takes no credentials"
            )));
        }
        // Google's libraries take a bare host:port as plain HTTP.
        let base = if host.contains("://") {
            host.trim_end_matches('/').to_string()
        } else {
            format!("http://{host}")
        };
        // object_store reaches another endpoint through a service account key that names
        // it and turns OAuth off: the emulator accepts unsigned requests.
        let key = serde_json::json!({
            "private_key": "",
            "private_key_id": "",
            "client_email": "",
            "gcs_base_url": base,
            "disable_oauth": true,
        });
        builder = builder.with_service_account_key(key.to_string());
        if base.starts_with("http://") {
            let allow = GoogleConfigKey::Client(ClientConfigKey::AllowHttp);
            builder = builder.with_config(allow, "true");
        }
    }
    let store = builder
        .build()
        .map_err(|e| Error::invalid(format!("{url}: {e}")))?;
    Ok((Arc::new(store), prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_container_and_prefix() {
        assert_eq!(
            split("az://backups/site/a/", "az"),
            ("backups".into(), "site/a".into())
        );
        assert_eq!(split("gs://b", "gs"), ("b".into(), String::new()));
    }

    #[test]
    fn reads_a_connection_string() {
        let text = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;\
                    AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;\
                    QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;";
        let got: Vec<(String, String)> = connection_string(text)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_string(), v))
            .collect();
        assert_eq!(
            got,
            [
                ("azure_storage_account_name", "devstoreaccount1"),
                ("azure_storage_account_key", "a2V5"),
                (
                    "azure_storage_endpoint",
                    "http://127.0.0.1:10000/devstoreaccount1"
                ),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let cloud =
            connection_string("AccountName=acct;AccountKey=k;EndpointSuffix=core.chinacloudapi.cn")
                .unwrap();
        assert_eq!(
            cloud.last().map(|(_, v)| v.as_str()),
            Some("https://acct.blob.core.chinacloudapi.cn")
        );
        assert!(connection_string("AccountName").is_err());
    }
}
