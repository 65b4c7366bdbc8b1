//! Listeners, the TCP token, the one-server-per-cache lock, `address`, Capabilities.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_server::client::{self, AddressForm};
use common::*;
use pb::capabilities_client::CapabilitiesClient;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use tonic::Code;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_requires_the_token_and_unix_does_not() {
    let mut s = TestServer::start().await;
    let req = || pb::GetCapabilitiesRequest::default();

    // Unix socket: no token needed.
    let caps = CapabilitiesClient::new(s.unix_channel().await)
        .get_capabilities(req())
        .await
        .unwrap()
        .into_inner();
    assert!(caps.execution_capabilities.unwrap().exec_enabled);

    let ch = s.tcp_channel().await;
    let err = CapabilitiesClient::new(ch.clone())
        .get_capabilities(req())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");

    let mut wrong = CapabilitiesClient::with_interceptor(ch.clone(), |mut r: tonic::Request<()>| {
        r.metadata_mut().insert(
            clonestage_server::TOKEN_HEADER,
            "0".repeat(64).parse().unwrap(),
        );
        Ok(r)
    });
    let err = wrong.get_capabilities(req()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");

    // Execute over TCP without the token is refused too (not just Capabilities).
    let err = pb::execution_client::ExecutionClient::new(ch.clone())
        .execute(pb::ExecuteRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    let token = s.handle().token().to_string();
    assert_eq!(
        std::fs::read_to_string(s.cache().join("server/token"))
            .unwrap()
            .trim(),
        token
    );
    let mut right = CapabilitiesClient::with_interceptor(ch, move |mut r: tonic::Request<()>| {
        r.metadata_mut()
            .insert(clonestage_server::TOKEN_HEADER, token.parse().unwrap());
        Ok(r)
    });
    assert!(right.get_capabilities(req()).await.is_ok());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_private_and_address_prints_bazel_flags() {
    let mut s = TestServer::start().await;
    let server = s.cache().canonicalize().unwrap().join("server");
    assert_eq!(mode(&server), 0o700);
    let sock = server.join("clonestage.sock");
    assert!(std::fs::metadata(&sock).unwrap().file_type().is_socket());
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(&server.join("token")), 0o600);
    let text = std::fs::read_to_string(server.join("tcp-port")).unwrap();
    let mut lines = text.lines();
    let port: u16 = lines.next().unwrap().parse().unwrap();
    let pid: u32 = lines.next().unwrap().parse().unwrap();
    assert_eq!(pid, std::process::id());
    assert_eq!(port, s.handle().tcp_port());

    let unix = client::address(&s.cache(), AddressForm::Unix).unwrap();
    assert_eq!(
        unix,
        vec![format!("--remote_executor=unix:{}", sock.display())]
    );
    // The token is a secret: never printed (a printed flag ends up in some argv), only in the
    // private rc file Bazel reads.
    let tcp = client::address(&s.cache(), AddressForm::Tcp).unwrap();
    assert_eq!(
        tcp,
        vec![format!("--remote_executor=grpc://127.0.0.1:{port}")]
    );
    let token = s.handle().token().to_string();
    let rc = client::tcp_bazelrc(&s.cache()).unwrap();
    assert_eq!(rc, server.join("tcp.bazelrc"));
    assert_eq!(mode(&rc), 0o600);
    let text = std::fs::read_to_string(&rc).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        &lines[..3],
        [
            format!("build --remote_executor=grpc://127.0.0.1:{port}"),
            format!("build --remote_exec_header=x-clonestage-token={token}"),
            format!("build --remote_cache_header=x-clonestage-token={token}"),
        ]
    );
    assert!(lines[3..]
        .iter()
        .all(|l| l.ends_with(&format!(" --remote_executor=grpc://127.0.0.1:{port}"))));
    s.stop().await;
    assert!(!rc.exists(), "tcp.bazelrc removed on shutdown");
    // Other tests' servers in this process start processes; one between fork and exec holds
    // a copy of every descriptor, this lock's too, for a moment: poll, bounded.
    let t0 = std::time::Instant::now();
    let err = loop {
        match client::address(&s.cache(), AddressForm::Unix) {
            Err(e) => break e.to_string(),
            Ok(a) if t0.elapsed().as_secs() >= 5 => panic!("still running after stop: {a:?}"),
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    };
    assert!(err.contains("no clonestage server is running"), "{err}");
    assert!(!sock.exists(), "socket removed on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_cache_is_refused() {
    let mut s = TestServer::start().await;
    let err = clonestage_server::start(TestServer::opts(s.dir.path(), 1))
        .await
        .err()
        .expect("second server refused");
    let msg = format!("{err:#}");
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    // The first one still serves.
    let mut c = s.clients().await;
    assert!(c
        .caps
        .get_capabilities(pb::GetCapabilitiesRequest::default())
        .await
        .is_ok());
    s.stop().await;
    // Once it stopped, a new server can take the cache.
    let h = clonestage_server::start(TestServer::opts(s.dir.path(), 1))
        .await
        .unwrap();
    h.shutdown(std::time::Duration::from_secs(1), std::future::pending())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_cover_bazel_4_to_8() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let caps = c
        .caps
        .get_capabilities(pb::GetCapabilitiesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let cache = caps.cache_capabilities.unwrap();
    assert_eq!(
        cache.digest_functions,
        vec![pb::digest_function::Value::Sha256 as i32]
    );
    assert!(
        cache
            .action_cache_update_capabilities
            .unwrap()
            .update_enabled
    );
    assert!(cache.max_batch_total_size_bytes > 0);
    let lo = caps.low_api_version.unwrap();
    let hi = caps.high_api_version.unwrap();
    assert_eq!((lo.major, lo.minor), (2, 0));
    assert!(hi.major == 2 && hi.minor >= 1);
    s.stop().await;
}

/// One GetCapabilities call over the unix socket in HTTP/2 spoken by hand, with `authority` as
/// the `:authority` pseudo-header: the http crate cannot express the ones unix-socket clients
/// send (no `Uri` holds a path as its authority), so neither can a tonic or h2 client. Frames:
/// the preface, SETTINGS, one HEADERS (HPACK literals without indexing or Huffman), one DATA
/// with the empty request. Returns the decoded reply, or what came instead (RST_STREAM, ...).
fn capabilities_with_authority(
    sock: &std::path::Path,
    authority: &str,
) -> Result<pb::ServerCapabilities, String> {
    use prost::Message;
    use std::io::{Read, Write};

    fn int7(out: &mut Vec<u8>, n: usize) {
        if n < 127 {
            out.push(n as u8);
            return;
        }
        out.push(127);
        let mut n = n - 127;
        while n >= 128 {
            out.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        out.push(n as u8);
    }
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (
            ":path",
            "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities",
        ),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0); // literal header field without indexing, new name
        int7(&mut block, name.len());
        block.extend(name.as_bytes());
        int7(&mut block, value.len());
        block.extend(value.as_bytes());
    }
    const DATA: u8 = 0;
    const HEADERS: u8 = 1;
    const RST_STREAM: u8 = 3;
    const SETTINGS: u8 = 4;
    const GOAWAY: u8 = 7;
    const END_STREAM: u8 = 1;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, 0x4 /* END_HEADERS */, 1, &block));
    out.extend(frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 0])); // uncompressed, 0 bytes

    let mut s = std::os::unix::net::UnixStream::connect(sock).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(&out).map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head)
            .map_err(|e| format!("reading a frame header: {e}"))?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload)
            .map_err(|e| format!("reading a frame: {e}"))?;
        match (kind, stream) {
            (SETTINGS, 0) if flags & 1 == 0 => s
                .write_all(&frame(SETTINGS, 1 /* ACK */, 0, &[]))
                .map_err(|e| e.to_string())?,
            (RST_STREAM, 1) => {
                return Err(format!("RST_STREAM, error code {payload:?}"));
            }
            (GOAWAY, 0) => return Err(format!("GOAWAY {payload:?}")),
            (DATA, 1) => body.extend(&payload),
            // The trailers (grpc-status) end the stream.
            (HEADERS, 1) if flags & END_STREAM != 0 => break,
            _ => {}
        }
    }
    // One gRPC message: a 0 (uncompressed) byte, a 4-byte length, the message.
    if body.len() < 5 {
        return Err(format!("no reply message ({} bytes of DATA)", body.len()));
    }
    pb::ServerCapabilities::decode(&body[5..]).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unix_socket_accepts_any_authority() {
    let mut s = TestServer::start().await;
    let sock = s.handle().socket();
    let raw = sock.to_str().unwrap().to_string();
    // grpc-core (grpcio, C++) since 1.57: the path, %-encoded.
    let encoded: String = raw
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    // grpc-java (Bazel): the raw socket path. Then a host name as a control.
    for authority in [raw.as_str(), encoded.as_str(), "localhost"] {
        let sock = sock.clone();
        let a = authority.to_string();
        let caps = tokio::task::spawn_blocking(move || capabilities_with_authority(&sock, &a))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!(":authority {authority:?} refused: {e}"));
        assert!(
            caps.execution_capabilities.unwrap().exec_enabled,
            "{authority}"
        );
    }
    s.stop().await;
}

/// Port and token survive a restart, so a Bazel pointed at the rc file (or a pasted executor
/// line) keeps working; a port taken meanwhile means a new port and a new token (its holder
/// may have been sent the old one), and a token file others could read is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_keeps_its_port_and_token() {
    let mut s = TestServer::start().await;
    let opts = TestServer::opts(s.dir.path(), 1);
    let token_file = s.cache().join("server/token");
    let (port, token) = (s.handle().tcp_port(), s.handle().token().to_string());
    let rc_before = std::fs::read_to_string(s.cache().join("server/tcp.bazelrc")).unwrap();
    s.stop().await;

    let h = clonestage_server::start(opts.clone()).await.unwrap();
    assert_eq!(h.tcp_port(), port, "same port after a restart");
    assert_eq!(h.token(), token, "same token after a restart");
    let rc_after = std::fs::read_to_string(s.cache().join("server/tcp.bazelrc")).unwrap();
    assert_eq!(rc_after, rc_before);
    let mut caps = CapabilitiesClient::with_interceptor(
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
            .unwrap(),
        {
            let token = token.clone();
            move |mut r: tonic::Request<()>| {
                r.metadata_mut()
                    .insert(clonestage_server::TOKEN_HEADER, token.parse().unwrap());
                Ok(r)
            }
        },
    );
    assert!(caps
        .get_capabilities(pb::GetCapabilitiesRequest::default())
        .await
        .is_ok());
    h.shutdown(std::time::Duration::from_secs(5), std::future::pending())
        .await
        .unwrap();

    // A token file others may have read is replaced; the port stays.
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let h = clonestage_server::start(opts.clone()).await.unwrap();
    assert_eq!(h.tcp_port(), port);
    assert_ne!(h.token(), token, "a token readable by others is not reused");
    assert_eq!(mode(&token_file), 0o600);
    let token2 = h.token().to_string();
    h.shutdown(std::time::Duration::from_secs(5), std::future::pending())
        .await
        .unwrap();

    // Someone else holds the port: another port, and another token.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let h = clonestage_server::start(opts.clone()).await.unwrap();
    assert_ne!(h.tcp_port(), port);
    assert_ne!(h.token(), token2, "a new port gets a new token");
    let rc = std::fs::read_to_string(s.cache().join("server/tcp.bazelrc")).unwrap();
    assert!(
        rc.contains(&format!("grpc://127.0.0.1:{}\n", h.tcp_port())),
        "{rc}"
    );
    assert!(rc.contains(h.token()), "{rc}");
    let new_port = h.tcp_port();
    h.shutdown(std::time::Duration::from_secs(5), std::future::pending())
        .await
        .unwrap();
    drop(squatter);
    // The new port is the one remembered from now on.
    let h = clonestage_server::start(opts).await.unwrap();
    assert_eq!(h.tcp_port(), new_port);
    h.shutdown(std::time::Duration::from_secs(5), std::future::pending())
        .await
        .unwrap();
}
