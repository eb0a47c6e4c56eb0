//! `pressure keys create|list|show|update|revoke`: API keys issued at
//! runtime, through a running gateway's admin API (`/admin/pressure/keys`,
//! `gateway.auth.runtimeKeys`; see `docs/api-keys.md`).
//!
//! * `--admin-url URL` (also `--admin`; default `$PRESSURE_ADMIN_URL`, else
//!   `http://127.0.0.1:8081`): the admin listener.
//! * The admin token: `--admin-token TOKEN`, else the variable
//!   `--token-env VAR` names, else `$PRESSURE_ADMIN_TOKEN` when set.
//! * Output: JSON (one document per line; `list` one key per line), or
//!   with `--table` aligned columns. `create` prints the key once — it is
//!   not kept anywhere but by the caller.

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};
use std::io::Write;

/// Options of `pressure keys`.
#[derive(Debug, clap::Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    action: KeysAction,
    #[command(flatten)]
    admin: Admin,
}

/// Where the admin API is, and its token.
#[derive(Debug, clap::Args)]
struct Admin {
    /// The admin listener of a running gateway, e.g. `http://127.0.0.1:8081`
    /// (default: `$PRESSURE_ADMIN_URL`, else `http://127.0.0.1:8081`).
    #[arg(long, alias = "admin", global = true)]
    admin_url: Option<String>,
    /// The admin token (`gateway.admin.tokenEnv`); prefer `--token-env`,
    /// which keeps it out of the process list.
    #[arg(long, global = true)]
    admin_token: Option<String>,
    /// The environment variable holding the admin token (default:
    /// `PRESSURE_ADMIN_TOKEN`, when set).
    #[arg(long, global = true)]
    token_env: Option<String>,
    /// Aligned columns instead of JSON lines.
    #[arg(long, global = true)]
    table: bool,
}

#[derive(Debug, clap::Subcommand)]
enum KeysAction {
    /// Issues a key for a tenant; prints it once, with its id.
    Create(CreateArgs),
    /// Lists the live keys (never the keys themselves).
    List(ListArgs),
    /// Shows one key, with the usage of its own limits.
    Show {
        /// The key's id (`key_…`).
        id: String,
    },
    /// Changes a key's limits, use cases, expiry or metadata, live on every
    /// gateway of the backend.
    Update(UpdateArgs),
    /// Revokes a key on every gateway of the backend.
    Revoke {
        /// The key's id (`key_…`).
        id: String,
    },
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// The tenant the key names.
    #[arg(long)]
    tenant: String,
    /// A name for logs and its resource (`gateway:apikey:<name>`).
    #[arg(long)]
    name: Option<String>,
    /// The key's own limits, a JSON object, e.g. '{"requestsPerMinute":60}'.
    #[arg(long)]
    limits: Option<String>,
    /// A use case the key may call (repeat; none: all).
    #[arg(long = "use-case")]
    use_cases: Vec<String>,
    /// When the key stops working (RFC 3339, e.g. 2030-01-31T00:00:00Z).
    #[arg(long)]
    expires_at: Option<String>,
    /// Metadata, a JSON object.
    #[arg(long)]
    metadata: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this tenant's keys.
    #[arg(long)]
    tenant: Option<String>,
    /// At most this many keys (each page at most 1000).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
}

#[derive(Debug, clap::Args)]
struct UpdateArgs {
    /// The key's id (`key_…`).
    id: String,
    /// New limits, a JSON object, or `null` to remove them.
    #[arg(long)]
    limits: Option<String>,
    /// The use cases it may call, replacing the list (repeat).
    #[arg(long = "use-case", conflicts_with = "all_use_cases")]
    use_cases: Vec<String>,
    /// Let it call every use case again.
    #[arg(long)]
    all_use_cases: bool,
    /// A new expiry (RFC 3339).
    #[arg(long, conflicts_with = "no_expiry")]
    expires_at: Option<String>,
    /// Remove its expiry.
    #[arg(long)]
    no_expiry: bool,
    /// New metadata, a JSON object, or `null`.
    #[arg(long)]
    metadata: Option<String>,
}

/// `text` as JSON, or what is wrong with it under `flag`.
fn json_arg(flag: &str, text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).with_context(|| format!("{flag}: not JSON"))
}

/// The admin API of `admin`.
struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    fn new(admin: &Admin) -> anyhow::Result<Self> {
        let base = admin
            .admin_url
            .clone()
            .or_else(|| std::env::var("PRESSURE_ADMIN_URL").ok())
            .unwrap_or_else(|| "http://127.0.0.1:8081".to_owned());
        let token = match (&admin.admin_token, &admin.token_env) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(var)) => Some(
                std::env::var(var).with_context(|| format!("--token-env {var}: the variable is not set"))?,
            ),
            (None, None) => std::env::var("PRESSURE_ADMIN_TOKEN").ok(),
        };
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    /// `method /admin/pressure/keys{path}` with `body`; the answer's JSON
    /// (`null` for a `204`), or its error message.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}/admin/pressure/keys{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.with_context(|| format!("{url}: no answer"))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        let body: Value = resp
            .json()
            .await
            .with_context(|| format!("{url}: the answer is not JSON"))?;
        if !status.is_success() {
            let message = body["error"]["message"].as_str().unwrap_or("no message");
            bail!("{url}: {status}: {message}");
        }
        Ok(body)
    }
}

/// The body of `create`.
fn create_body(a: CreateArgs) -> anyhow::Result<Value> {
    let mut body = Map::new();
    body.insert("tenant".into(), json!(a.tenant));
    if let Some(n) = a.name {
        body.insert("name".into(), json!(n));
    }
    if let Some(l) = a.limits {
        body.insert("limits".into(), json_arg("--limits", &l)?);
    }
    if !a.use_cases.is_empty() {
        body.insert("useCases".into(), json!(a.use_cases));
    }
    if let Some(e) = a.expires_at {
        body.insert("expiresAt".into(), json!(e));
    }
    if let Some(m) = a.metadata {
        body.insert("metadata".into(), json_arg("--metadata", &m)?);
    }
    Ok(Value::Object(body))
}

/// The body of `update`.
fn update_body(a: &UpdateArgs) -> anyhow::Result<Value> {
    let mut body = Map::new();
    if let Some(l) = &a.limits {
        body.insert("limits".into(), json_arg("--limits", l)?);
    }
    if a.all_use_cases {
        body.insert("useCases".into(), Value::Null);
    } else if !a.use_cases.is_empty() {
        body.insert("useCases".into(), json!(a.use_cases));
    }
    if a.no_expiry {
        body.insert("expiresAt".into(), Value::Null);
    } else if let Some(e) = &a.expires_at {
        body.insert("expiresAt".into(), json!(e));
    }
    if let Some(m) = &a.metadata {
        body.insert("metadata".into(), json_arg("--metadata", m)?);
    }
    if body.is_empty() {
        bail!("nothing to change: give --limits, --use-case, --all-use-cases, --expires-at, --no-expiry or --metadata");
    }
    Ok(Value::Object(body))
}

/// A path segment: ids are `key_` and hex digits, anything else is sent
/// percent-encoded (the gateway refuses it).
fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub(crate) async fn run(args: KeysArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.admin)?;
    let table = args.admin.table;
    match args.action {
        KeysAction::Create(a) => {
            let doc = client
                .call(reqwest::Method::POST, "", Some(create_body(a)?))
                .await?;
            print(&[doc], table, true)?;
            eprintln!("the key is shown only now: store it");
        }
        KeysAction::List(a) => {
            let mut all = Vec::new();
            let mut after: Option<String> = None;
            while all.len() < a.limit {
                let mut query = format!("?limit={}", (a.limit - all.len()).min(1000));
                if let Some(t) = &a.tenant {
                    query.push_str(&format!("&tenant={}", segment(t)));
                }
                if let Some(id) = &after {
                    query.push_str(&format!("&after={}", segment(id)));
                }
                let page = client.call(reqwest::Method::GET, &query, None).await?;
                all.extend(page["keys"].as_array().cloned().unwrap_or_default());
                match page["next"].as_str() {
                    Some(next) => after = Some(next.to_owned()),
                    None => break,
                }
            }
            if all.is_empty() {
                eprintln!("no keys");
            }
            print(&all, table, false)?;
        }
        KeysAction::Show { id } => {
            let doc = client
                .call(reqwest::Method::GET, &format!("/{}", segment(&id)), None)
                .await?;
            print(&[doc], table, false)?;
        }
        KeysAction::Update(a) => {
            let body = update_body(&a)?;
            let doc = client
                .call(
                    reqwest::Method::PATCH,
                    &format!("/{}", segment(&a.id)),
                    Some(body),
                )
                .await?;
            print(&[doc], table, false)?;
        }
        KeysAction::Revoke { id } => {
            client
                .call(reqwest::Method::DELETE, &format!("/{}", segment(&id)), None)
                .await?;
            eprintln!("revoked {id}");
        }
    }
    Ok(())
}

/// `docs` as JSON lines, or a table (with the key column for `create`).
fn print(docs: &[Value], table: bool, with_key: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if !table {
        for d in docs {
            writeln!(out, "{d}")?;
        }
        return Ok(out.flush()?);
    }
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "all".to_owned(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    };
    let mut columns = vec!["id", "tenant", "name", "expiresAt", "useCases", "limits"];
    if with_key {
        columns.push("key");
    }
    let rows: Vec<Vec<String>> = docs
        .iter()
        .map(|d| columns.iter().map(|c| text(&d[*c])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([c.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    writeln!(
        out,
        "{}",
        line(columns.iter().map(|c| c.to_uppercase()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r))?;
    }
    Ok(out.flush()?)
}
