//! `gateway.tracing`: OpenTelemetry traces exported over OTLP
//! (`docs/tracing.md`), and how the standard `OTEL_*` variables complete
//! it. Off by default: on when `gateway.tracing` is present, or when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it
//! off whatever the file says.
//!
//! Precedence, field by field: the file's value, else the `OTEL_*`
//! variable, else the default. The variables read: the two endpoints
//! above (the traces one wins; the general one gets `/v1/traces` appended
//! for HTTP), `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf` or `grpc`),
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` (`always_on`, `always_off`,
//! `traceidratio` and their `parentbased_` forms) with
//! `OTEL_TRACES_SAMPLER_ARG`, and `OTEL_EXPORTER_OTLP_HEADERS`
//! (`k=v,k2=v2`).

use super::ConfigError;
use pressure_core::trace::Sampler;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `gateway.tracing`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TracingConfig {
    /// The OTLP receiver: for `http/protobuf` the full URL spans are
    /// POSTed to (e.g. `http://127.0.0.1:4318/v1/traces`), for `grpc` the
    /// collector's base URL (`http://127.0.0.1:4317`). Absent:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// else `http://localhost:4318/v1/traces` (`4317` for gRPC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`; absent: `OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// else `http/protobuf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtlpProtocol>,
    /// The resource's `service.name`; absent: `OTEL_SERVICE_NAME`, else
    /// `pressure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The share of new traces recorded, `0` to `1`; a request whose
    /// `traceparent` names a parent follows the parent's `sampled` flag.
    /// Absent: `OTEL_TRACES_SAMPLER`/`_ARG`, else `1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
    /// Headers sent with every export (e.g. an API key); absent:
    /// `OTEL_EXPORTER_OTLP_HEADERS`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// OTLP's transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum OtlpProtocol {
    /// Protobuf POSTed over HTTP.
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// gRPC (`TraceService/Export`) over HTTP/2.
    #[serde(rename = "grpc")]
    Grpc,
}

/// The tracing the gateway runs with: the file and the variables joined.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedTracing {
    /// Where spans go.
    pub endpoint: http::Uri,
    /// How.
    pub protocol: OtlpProtocol,
    /// `service.name`.
    pub service_name: String,
    /// Which traces are recorded.
    pub sampler: Sampler,
    /// Export headers.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

const PATH: &str = "gateway.tracing";

fn endpoint_of(raw: &str, path: &str) -> Result<http::Uri, ConfigError> {
    let uri: http::Uri = raw
        .parse()
        .map_err(|e| ConfigError::new(path, format!("`{raw}` is not a URL: {e}")))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err(ConfigError::new(
            path,
            format!("`{raw}` must be an http:// or https:// URL with a host"),
        )),
    }
}

fn ratio_of(r: f64, path: &str) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(ConfigError::new(
            path,
            format!("must be between 0 and 1, got {r}"),
        ))
    }
}

/// Checks the file's `gateway.tracing` alone (`pressure config check`).
pub(crate) fn check(config: Option<&TracingConfig>) -> Result<(), ConfigError> {
    let Some(c) = config else { return Ok(()) };
    if let Some(e) = &c.endpoint {
        endpoint_of(e, &format!("{PATH}.endpoint"))?;
    }
    if let Some(r) = c.sample_ratio {
        ratio_of(r, &format!("{PATH}.sampleRatio"))?;
    }
    for (k, v) in &c.headers {
        header_of(k, v, &format!("{PATH}.headers.{k}"))?;
    }
    Ok(())
}

fn header_of(k: &str, v: &str, path: &str) -> Result<(http::HeaderName, http::HeaderValue), ConfigError> {
    let name = http::HeaderName::try_from(k.trim())
        .map_err(|_| ConfigError::new(path, "is not a valid header name"))?;
    let value = http::HeaderValue::try_from(v.trim())
        .map_err(|_| ConfigError::new(path, "is not a valid header value"))?;
    Ok((name, value))
}

fn sampler_from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Sampler>, ConfigError> {
    let Some(kind) = env("OTEL_TRACES_SAMPLER") else {
        return Ok(None);
    };
    let arg = || -> Result<f64, ConfigError> {
        match env("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(a) => {
                let r: f64 = a.trim().parse().map_err(|_| {
                    ConfigError::new("OTEL_TRACES_SAMPLER_ARG", format!("`{a}` is not a number"))
                })?;
                ratio_of(r, "OTEL_TRACES_SAMPLER_ARG")
            }
        }
    };
    let (ratio, parent_based) = match kind.trim() {
        "always_on" => (1.0, false),
        "always_off" => (0.0, false),
        "traceidratio" => (arg()?, false),
        "parentbased_always_on" => (1.0, true),
        "parentbased_always_off" => (0.0, true),
        "parentbased_traceidratio" => (arg()?, true),
        other => {
            return Err(ConfigError::new(
                "OTEL_TRACES_SAMPLER",
                format!("`{other}` is not a sampler this gateway knows"),
            ))
        }
    };
    Ok(Some(Sampler { ratio, parent_based }))
}

/// Joins `config` and the `OTEL_*` variables `env` reads (module docs):
/// `None` when tracing is off.
pub fn resolve_tracing(
    config: Option<&TracingConfig>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ResolvedTracing>, ConfigError> {
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none")
    {
        return Ok(None);
    }
    let traces_endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let base_endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT");
    let empty = TracingConfig::default();
    let c = match config {
        Some(c) => c,
        None if traces_endpoint.is_some() || base_endpoint.is_some() => &empty,
        None => return Ok(None),
    };
    check(Some(c))?;
    let protocol = match (c.protocol, env("OTEL_EXPORTER_OTLP_PROTOCOL")) {
        (Some(p), _) => p,
        (None, None) => OtlpProtocol::HttpProtobuf,
        (None, Some(p)) => match p.trim() {
            "http/protobuf" => OtlpProtocol::HttpProtobuf,
            "grpc" => OtlpProtocol::Grpc,
            other => {
                return Err(ConfigError::new(
                    "OTEL_EXPORTER_OTLP_PROTOCOL",
                    format!("`{other}` is not supported (http/protobuf or grpc)"),
                ))
            }
        },
    };
    let endpoint = match (&c.endpoint, traces_endpoint, base_endpoint) {
        (Some(e), _, _) => endpoint_of(e, &format!("{PATH}.endpoint"))?,
        (None, Some(e), _) => endpoint_of(&e, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?,
        (None, None, Some(e)) => {
            let e = match protocol {
                OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", e.trim().trim_end_matches('/')),
                OtlpProtocol::Grpc => e,
            };
            endpoint_of(&e, "OTEL_EXPORTER_OTLP_ENDPOINT")?
        }
        (None, None, None) => match protocol {
            OtlpProtocol::HttpProtobuf => http::Uri::from_static("http://localhost:4318/v1/traces"),
            OtlpProtocol::Grpc => http::Uri::from_static("http://localhost:4317"),
        },
    };
    let service_name = c
        .service_name
        .clone()
        .or_else(|| env("OTEL_SERVICE_NAME"))
        .unwrap_or_else(|| "pressure".to_owned());
    let sampler = match c.sample_ratio {
        Some(ratio) => Sampler {
            ratio,
            parent_based: true,
        },
        None => sampler_from_env(&env)?.unwrap_or_default(),
    };
    let mut headers = Vec::new();
    if c.headers.is_empty() {
        if let Some(list) = env("OTEL_EXPORTER_OTLP_HEADERS") {
            for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    ConfigError::new("OTEL_EXPORTER_OTLP_HEADERS", format!("`{pair}` is not key=value"))
                })?;
                headers.push(header_of(k, v, "OTEL_EXPORTER_OTLP_HEADERS")?);
            }
        }
    } else {
        for (k, v) in &c.headers {
            headers.push(header_of(k, v, &format!("{PATH}.headers.{k}"))?);
        }
    }
    Ok(Some(ResolvedTracing {
        endpoint,
        protocol,
        service_name,
        sampler,
        headers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn parse(json: &str) -> Result<TracingConfig, String> {
        let de = &mut serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize(de).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn off_unless_configured_or_an_endpoint_variable_is_set() {
        assert_eq!(resolve_tracing(None, &vars(&[])).expect("ok"), None);
        assert_eq!(
            resolve_tracing(None, &vars(&[("OTEL_SERVICE_NAME", "x")])).expect("ok"),
            None
        );
        let on = resolve_tracing(None, &vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]))
            .expect("ok")
            .expect("on");
        assert_eq!(on.endpoint, "http://c:4318/v1/traces");
        assert_eq!(on.service_name, "pressure");
        assert_eq!(on.sampler, Sampler::default());
        let off = resolve_tracing(
            Some(&TracingConfig::default()),
            &vars(&[("OTEL_SDK_DISABLED", "true")]),
        )
        .expect("ok");
        assert_eq!(off, None);
    }

    #[test]
    fn the_file_wins_over_the_variables_field_by_field() {
        let env = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://env-traces:4318/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-key=abc, x-other = d"),
        ]);
        let from_env = resolve_tracing(Some(&TracingConfig::default()), &env)
            .expect("ok")
            .expect("on");
        assert_eq!(from_env.endpoint, "http://env-traces:4318/v1/traces");
        assert_eq!(from_env.protocol, OtlpProtocol::Grpc);
        assert_eq!(from_env.service_name, "from-env");
        assert_eq!(
            from_env.sampler,
            Sampler {
                ratio: 0.25,
                parent_based: true
            }
        );
        assert_eq!(from_env.headers.len(), 2);
        assert_eq!(from_env.headers[1].0, "x-other");
        let file = parse(
            r#"{"endpoint": "http://file:4318/v1/traces", "protocol": "http/protobuf",
                "serviceName": "gw", "sampleRatio": 0.5, "headers": {"x-key": "f"}}"#,
        )
        .expect("parses");
        let joined = resolve_tracing(Some(&file), &env).expect("ok").expect("on");
        assert_eq!(joined.endpoint, "http://file:4318/v1/traces");
        assert_eq!(joined.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(joined.service_name, "gw");
        assert_eq!(joined.sampler.ratio, 0.5);
        assert_eq!(joined.headers.len(), 1);
    }

    #[test]
    fn bad_values_are_named_by_their_path() {
        let err = |c: TracingConfig| resolve_tracing(Some(&c), &vars(&[])).expect_err("refused");
        let e = err(TracingConfig {
            endpoint: Some("not a url".into()),
            ..TracingConfig::default()
        });
        assert_eq!(e.path, "gateway.tracing.endpoint");
        let e = err(TracingConfig {
            endpoint: Some("ftp://x/".into()),
            ..TracingConfig::default()
        });
        assert_eq!(e.path, "gateway.tracing.endpoint");
        let e = err(TracingConfig {
            sample_ratio: Some(1.5),
            ..TracingConfig::default()
        });
        assert_eq!(e.path, "gateway.tracing.sampleRatio");
        assert!(e.problem.contains("between 0 and 1"), "{}", e.problem);
        let e = parse(r#"{"protocol": "http/json"}"#).expect_err("refused");
        assert!(e.starts_with("protocol: unknown variant `http/json`"), "{e}");
        let e = parse(r#"{"sampleRate": 1}"#).expect_err("refused");
        assert!(e.contains("unknown field `sampleRate`"), "{e}");
        let e = resolve_tracing(
            None,
            &vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ]),
        )
        .expect_err("refused");
        assert_eq!(e.path, "OTEL_TRACES_SAMPLER_ARG");
        let e = resolve_tracing(
            None,
            &vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ]),
        )
        .expect_err("refused");
        assert_eq!(e.path, "OTEL_EXPORTER_OTLP_PROTOCOL");
    }
}
