//! Property tests of what the mirrored API parses from machines (job code can send anything):
//! `Content-Range`, parameter bodies (JSON, forms, multipart), token headers, job ids and query
//! keys. Whatever arrives, the answer is GitLab's status for it, never a panic or a `5xx`, and
//! nothing refused reaches GitLab.

use axum::http::HeaderValue;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;
use crate::mirror::relay::content_range_start;

const CASES: u32 = 256;

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Ruby's `String#to_i` of the text before the first `-`, as GitLab reads the start (values
/// beyond u64 read as 0 here: no trace is that long).
fn ruby_start(text: &str) -> u64 {
    let before = text.split('-').next().unwrap_or_default().trim_start();
    let before = before.strip_prefix('+').unwrap_or(before);
    let digits: String = before.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

#[test]
fn content_range_of_any_bytes_reads_the_leading_number_or_zero() {
    let values = prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| format!("{a}-{b}").into_bytes()),
        "[ +0-9a-z-]{0,40}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    runner()
        .run(&values, |raw| {
            let Ok(value) = HeaderValue::from_bytes(&raw) else {
                return Ok(());
            };
            let mut headers = axum::http::HeaderMap::new();
            headers.insert("content-range", value);
            let start = content_range_start(&headers).unwrap();
            prop_assert_eq!(start, ruby_start(&String::from_utf8_lossy(&raw)));
            Ok(())
        })
        .unwrap();
}

/// Bodies a machine might send as parameters: JSON-like text, Rack form keys, multipart bodies
/// (whole or cut short), and raw bytes.
fn parameter_body() -> impl Strategy<Value = (Option<String>, Vec<u8>)> {
    let types = prop_oneof![
        Just(None),
        Just(Some("application/json".to_string())),
        Just(Some("application/x-www-form-urlencoded".to_string())),
        Just(Some("multipart/form-data; boundary=XyZ".to_string())),
        Just(Some("multipart/form-data".to_string())),
        "[a-z/+;= -]{0,40}".prop_map(Some),
    ];
    let bodies = prop_oneof![
        "[{}\\[\\]\":,0-9a-z \\\\]{0,200}".prop_map(String::into_bytes),
        "([a-z]{1,3}(\\[[a-z]{0,2}\\]){0,40}=[a-z0-9%]{0,5}&?){0,20}".prop_map(String::into_bytes),
        multipart_body(),
        proptest::collection::vec(any::<u8>(), 0..512),
    ];
    (types, bodies)
}

fn multipart_body() -> impl Strategy<Value = Vec<u8>> {
    let part = (
        "[a-z\\[\\]]{0,12}",
        proptest::option::of("[a-z.]{1,8}"),
        "[ -~]{0,40}",
    );
    (
        proptest::collection::vec(part, 0..6),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(parts, cut)| {
            let mut body = String::new();
            for (name, file, value) in parts {
                body.push_str("--XyZ\r\nContent-Disposition: form-data; name=\"");
                body.push_str(&name);
                body.push('"');
                if let Some(f) = file {
                    body.push_str(&format!("; filename=\"{f}\""));
                }
                body.push_str(&format!("\r\n\r\n{value}\r\n"));
            }
            body.push_str("--XyZ--\r\n");
            let mut bytes = body.into_bytes();
            // Half the bodies are cut short somewhere, as a dropped upload would be.
            if cut.index(2) == 0 {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        })
}

fn request(method: &str, path: &str, content_type: Option<&str>, body: Vec<u8>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(t) = content_type
        && HeaderValue::from_str(t).is_ok()
    {
        builder = builder.header("content-type", t);
    }
    builder.body(Body::from(body)).unwrap()
}

#[test]
fn any_parameter_body_gets_gitlabs_status_and_never_reaches_gitlab() {
    let rt = runtime();
    let h = rt.block_on(async { harness() });
    let paths = prop_oneof![
        Just(("POST", "/api/v4/jobs/request")),
        Just(("POST", "/api/v4/runners/verify")),
        Just(("POST", "/api/v4/runners")),
        Just(("PUT", "/api/v4/jobs/7")),
    ];
    runner()
        .run(
            &(paths, parameter_body()),
            |((method, path), (ty, body))| {
                let answer = rt.block_on(h.call(request(method, path, ty.as_deref(), body)));
                // 400 malformed or missing token, 403 a token that opens nothing here.
                prop_assert!(
                    matches!(answer.status.as_u16(), 400 | 403),
                    "{method} {path}: {}",
                    answer.status
                );
                Ok(())
            },
        )
        .unwrap();
    assert!(
        h.upstream.calls().is_empty(),
        "a refused call reached GitLab"
    );
}

#[test]
fn a_body_over_its_limit_is_413_whether_or_not_its_length_is_declared() {
    let rt = runtime();
    let h = rt.block_on(async { harness() });
    let limit = h.app.limits.job_request_bytes as usize;
    let sizes = (limit + 1..limit * 3, any::<bool>());
    runner()
        .run(&sizes, |(size, declared)| {
            let bytes = vec![b' '; size];
            let body = if declared {
                Body::from(bytes)
            } else {
                // A chunked body: the limit must hold while reading, not only on the header.
                let chunks = bytes
                    .chunks(4096)
                    .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
                    .collect::<Vec<_>>();
                Body::from_stream(futures::stream::iter(chunks))
            };
            let r = Request::post("/api/v4/jobs/request")
                .header("content-type", "application/json")
                .body(body)
                .unwrap();
            prop_assert_eq!(rt.block_on(h.call(r)).status, StatusCode::PAYLOAD_TOO_LARGE);
            Ok(())
        })
        .unwrap();
}

#[test]
fn any_token_header_or_job_id_opens_nothing_and_never_reaches_gitlab() {
    let rt = runtime();
    let h = rt.block_on(async {
        let h = harness();
        h.queue_job("a", 60, json!([])).await;
        h
    });
    let ids = prop_oneof![
        Just("60".to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[0-9a-z%.+-]{0,24}",
    ];
    let tokens = prop_oneof![
        "glcbt-job6[0-9]".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..80),
    ];
    let routes = prop_oneof![Just("PUT"), Just("PATCH"), Just("GET"), Just("POST")];
    runner()
        .run(&(routes, ids, tokens), |(method, id, token)| {
            let path = match method {
                "PATCH" => format!("/api/v4/jobs/{id}/trace"),
                "PUT" => format!("/api/v4/jobs/{id}"),
                _ => format!("/api/v4/jobs/{id}/artifacts"),
            };
            let Ok(uri) = path.parse::<axum::http::Uri>() else {
                return Ok(());
            };
            let mut builder = Request::builder()
                .method(method)
                .uri(uri)
                .header("content-range", "0-1");
            if let Ok(v) = HeaderValue::from_bytes(&token) {
                builder = builder.header("job-token", v);
            }
            let r = builder.body(Body::from("{}")).unwrap();
            let answer = rt.block_on(h.call(r));
            // Job 60's own token is "glcbt-job60", which this generator can produce: with it,
            // only job 60 opens (and the fake GitLab then answers).
            let own = token == b"glcbt-job60" && id == "60";
            prop_assert!(
                own || matches!(answer.status.as_u16(), 400 | 403 | 404),
                "{method} {path} token {token:?}: {}",
                answer.status
            );
            Ok(())
        })
        .unwrap();
    let foreign = h
        .upstream
        .calls()
        .iter()
        .filter(|c| !c.path.starts_with("/api/v4/jobs/60"))
        .count();
    assert_eq!(foreign, 0, "a call for another job reached GitLab");
}

#[test]
fn form_keys_nest_at_most_32_levels_and_deeper_ones_are_400() {
    let rt = runtime();
    let h = rt.block_on(async { harness() });
    runner()
        .run(&(0usize..80), |depth| {
            let key = format!("info{}", "[a]".repeat(depth));
            let r = request(
                "POST",
                "/api/v4/runners/verify",
                Some("application/x-www-form-urlencoded"),
                format!("token=nobody&{key}=1").into_bytes(),
            );
            let expected = if depth > 32 { 400 } else { 403 };
            prop_assert_eq!(rt.block_on(h.call(r)).status.as_u16(), expected);
            Ok(())
        })
        .unwrap();
}

/// A query of 20,000 nested brackets (a URI may be up to 64 KiB long) once overflowed the
/// stack of the recursive key parser, which aborts the whole process.
#[tokio::test]
async fn a_query_nesting_20000_levels_is_400_not_a_crash() {
    let h = harness();
    let path = format!("/api/v4/jobs/1/trace?a{}=1", "[a]".repeat(20_000));
    let r = Request::patch(path.as_str())
        .header("content-range", "0-1")
        .body(Body::from("x"))
        .unwrap();
    assert_eq!(h.call(r).await.status, StatusCode::BAD_REQUEST);
}
