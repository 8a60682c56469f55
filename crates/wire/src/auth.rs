//! Cluster secret and the mutual HMAC handshake every connection starts with.
//!
//! Client -> server, at once: magic, protocol version, CR LF CR LF (`CLIENT_HELLO`).
//! Server -> client: magic, protocol version, "auth required" flag, 32-byte nonce.
//! Client -> server: HMAC(secret, "client" || server nonce), 32-byte client nonce.
//! Server -> client: status byte, HMAC(secret, "server" || client nonce).
//! Without a secret (loopback-only servers) the MACs are zeros and not checked. A client
//! that holds a secret talks only to servers that prove it.
//!
//! The client speaks first so that a wrong address fails at once instead of after the
//! connect timeout: a server of another protocol (an HTTP port such as the S3 gateway's)
//! waits for its client to speak, and answers bytes that are not its protocol with an error
//! (or closes), which the client then reports as "not a tomus server". The CR LF CR LF ends
//! what an HTTP server would read as a request head.

use std::net::SocketAddr;
use std::path::Path;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, ErrorKind, Result};

const MAGIC: &[u8; 4] = b"TOMS";
/// 2: typed requests in service envelopes, varint headers. 3: chunk transfers carry CRC32Cs.
/// 4: the client says hello first. 5: heartbeats carry the bytes a provider stores.
/// 6: requests may carry a request id (`Envelope::Traced`).
const PROTOCOL_VERSION: u8 = 6;
/// What a client sends as soon as it is connected (public for tests that speak the
/// protocol by hand).
pub const CLIENT_HELLO: [u8; 9] = [
    MAGIC[0],
    MAGIC[1],
    MAGIC[2],
    MAGIC[3],
    PROTOCOL_VERSION,
    b'\r',
    b'\n',
    b'\r',
    b'\n',
];
/// The start of the error a client gets from a peer that does not speak the protocol
/// (`ADDR is not a tomus server ...`): callers that know which server they expected can say so.
pub const NOT_A_TOMUS_SERVER: &str = "is not a tomus server";
const STATUS_OK: u8 = 0;
const STATUS_REFUSED: u8 = 1;

/// Shared secret proving cluster membership.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.len() < 16 {
            return Err(Error::invalid("cluster secret must be at least 16 bytes"));
        }
        Ok(ClusterSecret(bytes))
    }

    /// The secret from `file` if given, else from `TOMUS_CLUSTER_SECRET`, else none.
    pub fn load(file: Option<&Path>) -> Result<Option<Self>> {
        if let Some(path) = file {
            let text = std::fs::read(path).map_err(|e| {
                Error::invalid(format!("cannot read secret file {}: {e}", path.display()))
            })?;
            let trimmed = String::from_utf8_lossy(&text).trim().as_bytes().to_vec();
            return Self::new(trimmed).map(Some);
        }
        match std::env::var("TOMUS_CLUSTER_SECRET") {
            Ok(s) if !s.is_empty() => Self::new(s.into_bytes()).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether `candidate` is the secret itself (an HTTP request's bearer token or password),
    /// compared in constant time for candidates of the secret's length.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        candidate.len() == self.0.len()
            && candidate
                .iter()
                .zip(&self.0)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }

    fn mac(&self, label: &[u8], nonce: &[u8]) -> [u8; 32] {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("hmac key");
        mac.update(label);
        mac.update(nonce);
        mac.finalize().into_bytes().into()
    }

    fn verify(&self, label: &[u8], nonce: &[u8], tag: &[u8]) -> bool {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("hmac key");
        mac.update(label);
        mac.update(nonce);
        mac.verify_slice(tag).is_ok()
    }
}

/// Refuses to serve on a non-loopback address without a cluster secret.
pub fn check_bind(addr: &SocketAddr, secret: Option<&ClusterSecret>) -> Result<()> {
    if !addr.ip().is_loopback() && secret.is_none() {
        return Err(Error::new(
            ErrorKind::AuthFailed,
            format!(
                "refusing to listen on non-loopback address {addr} without a cluster secret \
                 (set TOMUS_CLUSTER_SECRET or pass --secret-file)"
            ),
        ));
    }
    Ok(())
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    // From the OS: a forked child must not repeat its parent's nonces.
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

fn io_err(e: std::io::Error) -> Error {
    Error::unavailable(format!("handshake failed: {e}"))
}

/// Server side of the handshake. `Err` means the peer is refused (the reason is logged by the
/// caller).
pub async fn accept(stream: &mut TcpStream, secret: Option<&ClusterSecret>) -> Result<()> {
    let server_nonce = nonce();
    let mut hello = Vec::with_capacity(38);
    hello.extend_from_slice(MAGIC);
    hello.push(PROTOCOL_VERSION);
    hello.push(secret.is_some() as u8);
    hello.extend_from_slice(&server_nonce);
    stream.write_all(&hello).await.map_err(io_err)?;

    let mut client_hello = [0u8; CLIENT_HELLO.len()];
    stream.read_exact(&mut client_hello).await.map_err(io_err)?;
    if client_hello[..4] != MAGIC[..] {
        return Err(Error::protocol("the peer is not a tomus client"));
    }
    if client_hello != CLIENT_HELLO {
        return Err(Error::protocol(format!(
            "the client speaks protocol version {}, this server {PROTOCOL_VERSION}",
            client_hello[4]
        )));
    }
    let mut reply = [0u8; 64];
    stream.read_exact(&mut reply).await.map_err(io_err)?;
    let (tag, client_nonce) = reply.split_at(32);
    let mut answer = [0u8; 33];
    if let Some(s) = secret {
        if !s.verify(b"client", &server_nonce, tag) {
            answer[0] = STATUS_REFUSED;
            let _ = stream.write_all(&answer).await;
            return Err(Error::new(
                ErrorKind::AuthFailed,
                "client did not prove the cluster secret",
            ));
        }
        answer[1..].copy_from_slice(&s.mac(b"server", client_nonce));
    }
    answer[0] = STATUS_OK;
    stream.write_all(&answer).await.map_err(io_err)
}

/// Client side of the handshake.
pub async fn connect(stream: &mut TcpStream, secret: Option<&ClusterSecret>) -> Result<()> {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "the peer".to_string(), |a| a.to_string());
    stream.write_all(&CLIENT_HELLO).await.map_err(io_err)?;
    let mut hello = [0u8; 38];
    // The first bytes alone tell another protocol, whose answer may be shorter than ours.
    let mut got = 0;
    while got < MAGIC.len() {
        match stream.read(&mut hello[got..]).await.map_err(io_err)? {
            0 => {
                return Err(Error::unavailable(format!(
                    "{peer} closed the connection during the handshake (is it a tomus server?)"
                )))
            }
            n => got += n,
        }
    }
    if &hello[..4] != MAGIC {
        let first_line = String::from_utf8_lossy(&hello[..got]);
        let first_line = first_line.lines().next().unwrap_or_default();
        return Err(Error::protocol(format!(
            "{peer} {NOT_A_TOMUS_SERVER} (it answered {first_line:?})"
        )));
    }
    stream.read_exact(&mut hello[got..]).await.map_err(io_err)?;
    if hello[4] != PROTOCOL_VERSION {
        return Err(Error::protocol(format!(
            "peer speaks protocol version {}, this client {}",
            hello[4], PROTOCOL_VERSION
        )));
    }
    let auth = hello[5] == 1;
    let server_nonce = &hello[6..];
    let client_nonce = nonce();
    let mut reply = [0u8; 64];
    match (auth, secret) {
        (true, None) => {
            return Err(Error::new(
                ErrorKind::AuthFailed,
                "server requires a cluster secret (set TOMUS_CLUSTER_SECRET or --secret-file)",
            ))
        }
        (true, Some(s)) => reply[..32].copy_from_slice(&s.mac(b"client", server_nonce)),
        // Whoever answers at the address without asking for the secret cannot prove it
        // either: writes sent to it could be kept and any bytes served.
        (false, Some(_)) => {
            return Err(Error::new(
                ErrorKind::AuthFailed,
                "the server does not ask for the cluster secret this client holds, so it \
                 cannot prove it belongs to the cluster; refusing it (start the server with \
                 the same TOMUS_CLUSTER_SECRET or --secret-file, or unset the client's)",
            ))
        }
        (false, None) => {}
    }
    reply[32..].copy_from_slice(&client_nonce);
    stream.write_all(&reply).await.map_err(io_err)?;
    let mut answer = [0u8; 33];
    stream.read_exact(&mut answer).await.map_err(|e| {
        Error::new(
            ErrorKind::AuthFailed,
            format!("server closed the handshake (wrong cluster secret?): {e}"),
        )
    })?;
    if answer[0] != STATUS_OK {
        return Err(Error::new(
            ErrorKind::AuthFailed,
            "server refused the cluster secret",
        ));
    }
    if let (true, Some(s)) = (auth, secret) {
        if !s.verify(b"server", &client_nonce, &answer[1..]) {
            return Err(Error::new(
                ErrorKind::AuthFailed,
                "server did not prove the cluster secret",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The handshake between a real listener and a real client socket, including servers
    //! that are not what they claim (issue 20, item 8).

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::new(s).expect("a long enough secret")
    }

    /// Runs `accept` with `server` against `connect` with `client`; both outcomes.
    async fn handshake(
        server: Option<ClusterSecret>,
        client: Option<ClusterSecret>,
    ) -> (Result<()>, Result<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let serving = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            accept(&mut s, server.as_ref()).await
        });
        let mut c = TcpStream::connect(addr).await.expect("connect");
        let client_side = connect(&mut c, client.as_ref()).await;
        drop(c);
        (client_side, serving.await.expect("server task"))
    }

    #[tokio::test]
    async fn matching_secrets_or_none_at_all_connect() {
        let (c, s) = handshake(None, None).await;
        assert!(c.is_ok() && s.is_ok(), "{c:?} {s:?}");
        let one = "correct horse battery staple";
        let (c, s) = handshake(Some(secret(one)), Some(secret(one))).await;
        assert!(c.is_ok() && s.is_ok(), "{c:?} {s:?}");
    }

    #[tokio::test]
    async fn a_wrong_or_missing_client_secret_is_refused() {
        let server = secret("correct horse battery staple");
        let (c, s) = handshake(Some(server.clone()), Some(secret("not the right secret!"))).await;
        assert_eq!(c.unwrap_err().kind, ErrorKind::AuthFailed);
        assert_eq!(s.unwrap_err().kind, ErrorKind::AuthFailed);
        let (c, _) = handshake(Some(server), None).await;
        assert_eq!(c.unwrap_err().kind, ErrorKind::AuthFailed);
    }

    /// A client holding the secret refuses a server that does not ask for it (a rogue
    /// server at the client's address), before it sends anything past its hello.
    #[tokio::test]
    async fn a_client_with_a_secret_refuses_a_server_that_asks_for_none() {
        let (c, s) = handshake(None, Some(secret("correct horse battery staple"))).await;
        let e = c.unwrap_err();
        assert_eq!(e.kind, ErrorKind::AuthFailed, "{e}");
        assert!(e.to_string().contains("cannot prove"), "{e}");
        // The server never got the client's proof: the client hung up after its hello.
        assert!(s.is_err(), "the handshake went on: {s:?}");
    }

    /// A server that claims to require the secret but cannot prove it knows it (it answers
    /// "accepted" with a made-up tag) is refused too.
    #[tokio::test]
    async fn a_server_that_cannot_prove_the_secret_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let rogue = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut hello = Vec::from(&MAGIC[..]);
            hello.extend_from_slice(&[PROTOCOL_VERSION, 1]);
            hello.extend_from_slice(&[7u8; 32]);
            s.write_all(&hello).await.expect("hello");
            let mut heard = [0u8; CLIENT_HELLO.len() + 64];
            s.read_exact(&mut heard)
                .await
                .expect("client hello and proof");
            let mut answer = [0u8; 33];
            answer[0] = STATUS_OK;
            s.write_all(&answer).await.expect("answer");
            // Held open, as a server that wants the client's requests would.
            let _ = s.read(&mut [0u8; 1]).await;
        });
        let mut c = TcpStream::connect(addr).await.expect("connect");
        let e = connect(&mut c, Some(&secret("correct horse battery staple")))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::AuthFailed, "{e}");
        assert!(e.to_string().contains("did not prove"), "{e}");
        drop(c);
        rogue.await.expect("rogue task");
    }
}
