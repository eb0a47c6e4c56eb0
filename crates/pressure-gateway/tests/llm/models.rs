//! `GET /v1/models` and `GET /v1/models/{id}`: the use cases in OpenAI's
//! shape, answered by the gateway without touching a provider or the
//! upstream, and `404 model_not_found` for an unknown id.

use super::embeddings::with_embeddings;
use super::{bounded, config, no_limits, Mock, TestGateway};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;

async fn get_json(gw: &TestGateway, path: &str) -> (StatusCode, Value) {
    let req = Request::get(format!("http://{}{path}", gw.addr))
        .body(Full::new(Bytes::new()))
        .expect("valid request");
    let (status, _, bytes) = gw.send(req).await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("JSON body ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

#[tokio::test]
async fn the_model_list_is_the_use_cases() {
    bounded(async {
        let mock = Mock::start().await;
        let section = with_embeddings(config(&mock, no_limits()));
        let mut want: Vec<String> = section["llm"]["useCases"]
            .as_object()
            .expect("use cases")
            .keys()
            .cloned()
            .collect();
        want.sort();
        let gw = TestGateway::start(section).await;
        let (status, body) = get_json(&gw, "/v1/models").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["object"], "list");
        let data = body["data"].as_array().expect("data");
        let ids: Vec<String> = data
            .iter()
            .map(|m| m["id"].as_str().expect("id").to_owned())
            .collect();
        assert_eq!(ids, want);
        for m in data {
            assert_eq!(m["object"], "model", "{m}");
            assert_eq!(m["created"], 0, "{m}");
            assert_eq!(m["owned_by"], "pressure", "{m}");
        }
        let kind = |id: &str| {
            data.iter()
                .find(|m| m["id"] == id)
                .map(|m| m["pressure"]["kind"].clone())
        };
        assert_eq!(kind("support"), Some("chat".into()));
        assert_eq!(kind("queue"), Some("chat".into()));
        assert_eq!(kind("search"), Some("embedding".into()));
        assert_eq!(mock.hits(), 0);
        assert_eq!(*mock.state.http_hits.lock(), 0, "not proxied");
    })
    .await;
}

#[tokio::test]
async fn one_model_is_retrieved_and_an_unknown_one_is_404() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(with_embeddings(config(&mock, no_limits()))).await;
        let (status, body) = get_json(&gw, "/v1/models/search").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["id"], "search");
        assert_eq!(body["object"], "model");
        assert_eq!(body["owned_by"], "pressure");
        assert_eq!(body["pressure"]["kind"], "embedding");
        let (status, body) = get_json(&gw, "/v1/models/support").await;
        assert_eq!((status, body["id"].clone()), (StatusCode::OK, "support".into()));

        let (status, body) = get_json(&gw, "/v1/models/no-such-use-case").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let error = &body["error"];
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["param"], "model");
        assert_eq!(error["code"], "model_not_found");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("no-such-use-case")),
            "{error}"
        );
        assert_eq!(mock.hits(), 0);
    })
    .await;
}
