//! `pressure keys create|list|show|update|revoke` against a real gateway
//! (the binary, memory backend, `gateway.auth.runtimeKeys`, an admin
//! token): the key printed once works on the proxy at once, `list` never
//! prints it, `revoke` makes it `401`, and a failure is one error line,
//! exit 1.

use super::support::{free_port, upstream, Gateway, TempDir};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

/// The variable holding the admin token (the spawned gateway inherits it).
const TOKEN_ENV: &str = "PRESSURE_CLI_KEYS_TEST_ADMIN_TOKEN";

/// `pressure keys <args>`: its stdout's JSON lines, stderr and exit code.
fn keys(admin: &str, args: &[&str]) -> (Vec<Value>, String, Option<i32>) {
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .arg("keys")
        .args(args)
        .args(["--admin-url", admin, "--token-env", TOKEN_ENV])
        .output()
        .expect("run pressure");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    (
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

/// `GET /` on the proxy with `x-api-key: key`; the status.
async fn with_key(proxy: &str, key: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{proxy}/"))
        .header("x-api-key", key)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("the proxy answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_are_issued_listed_and_revoked_through_the_admin_api() {
    std::env::set_var(TOKEN_ENV, "cli-keys-admin-token");
    let dir = TempDir::new("cli-keys");
    let up = upstream().await;
    let (proxy, admin) = (free_port(), free_port());
    let config = json!({"gateway": {
        "listen": format!("127.0.0.1:{proxy}"),
        "admin": {"listen": format!("127.0.0.1:{admin}"), "tokenEnv": TOKEN_ENV},
        "upstreams": {"demo": {"url": up.url, "pathPrefix": "/"}},
        "auth": {"runtimeKeys": true, "required": true},
        "pressure": {"perTenant": {"enabled": true, "limits": {"requestsPerMinute": 100}}}
    }});
    let mut gw = Gateway::spawn("keys", dir.path(), &config, &[]);
    gw.wait_ready().await;
    let admin = gw.admin.clone();

    let (created, said, code) = keys(
        &admin,
        &[
            "create",
            "--tenant",
            "acme",
            "--name",
            "ci",
            "--limits",
            r#"{"requestsPerMinute":50}"#,
        ],
    );
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(created.len(), 1, "{said}");
    let key = created[0]["key"].as_str().expect("the key, once").to_owned();
    let id = created[0]["id"].as_str().expect("an id").to_owned();
    assert!(key.starts_with("sk-pr-"), "{key}");
    assert_eq!(created[0]["tenant"], "acme");
    assert_eq!(with_key(&gw.proxy, &key).await, 200);

    let (listed, said, code) = keys(&admin, &["list", "--tenant", "acme"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert!(listed[0].get("key").is_none());
    assert!(!listed[0].to_string().contains(&key));
    let (none, _, _) = keys(&admin, &["list", "--tenant", "globex"]);
    assert!(none.is_empty());

    let (changed, said, code) = keys(&admin, &["update", &id, "--limits", r#"{"requestsPerMinute":7}"#]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(changed[0]["limits"]["requestsPerMinute"], 7);
    let (shown, _, _) = keys(&admin, &["show", &id]);
    assert_eq!(shown[0]["usage"][0]["used"], 1, "{shown:?}");

    let (_, said, code) = keys(&admin, &["revoke", &id]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(with_key(&gw.proxy, &key).await, 401);
    let (_, said, code) = keys(&admin, &["revoke", &id]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.starts_with("error: ") && said.contains("404"), "{said}");
    assert!(!gw.log().contains(&key), "the gateway logged the key");
}
