//! The coding agents and the vendors' Python SDKs through the gateway, for
//! real: Claude Code (`claude -p`) and the `anthropic` SDK on
//! `POST /v1/messages`, Codex CLI (`codex exec`) and the `openai` SDK's
//! `responses` on `POST /v1/responses`, all against pressure's mock
//! provider, each charged to its tenant's budget.
//!
//! One stack per test: the mock provider in this process (`pressure_mock`,
//! one price for every model so its bill and the gateway's price table
//! agree, prompt-cache classes included), and the `pressure gateway` binary
//! on a config written to a temporary directory ([`Stack`]), with
//!
//! * providers `anthropic` (kind `anthropic`), `responses` (kind
//!   `openai-responses`) and `openai` (kind `openai`), all at the mock;
//! * use case `claude` (`aliases` `["claude-*"]`): the Anthropic provider,
//!   then OpenAI's chat completions as backup; use case `codex` (`aliases`
//!   `["gpt-5*", "*codex*"]`): the Responses provider, then the Anthropic
//!   one — each agent natively first, the other vendor in a storm;
//! * API keys `dev-alice` and `dev-bob` naming the tenants of those names,
//!   each with a daily money budget (`costMicroUsdPerDay`), changed live
//!   through `PUT /admin/pressure/tenants/{id}/limits` for the spent-budget
//!   tests and read back from `GET` of the same path.
//!
//! The agents come from `tools/agents` (`npm ci` there; `.ci/run` does it
//! and exports `PRESSURE_AGENT_BIN_DIR`); the SDKs from a venv cached under
//! the cargo target directory (`agents-sdk-venv`, built once from the
//! package index). When either cannot be had the test says so in one
//! SKIPPED line ([`pressure_testkit::skip`]); with
//! `PRESSURE_REQUIRE_AGENTS=1` (set by `.ci/run`) that is a failure.
//!
//! What the agents send and how they react to a 429 is recorded in
//! `crates/pressure-llm/tests/fixtures/agents/README.md`.

mod sdk;
mod stack;

use stack::{agent_bin, Stack, CLAUDE_MODEL, CODEX_MODEL};
use std::time::Duration;

/// Set to `1` to make a missing agent, Node.js or SDK venv a failure.
pub(crate) const REQUIRE: &str = "PRESSURE_REQUIRE_AGENTS";

/// A budget no test's traffic reaches: 100 dollars a day.
const ROOMY_BUDGET: u64 = 100_000_000;

/// A budget no call fits in: one micro-dollar a day.
const SPENT_BUDGET: u64 = 1;

/// Runs `fut`, failing the test after `limit` (a bound on a hang).
async fn bounded<F: std::future::Future<Output = ()>>(limit: Duration, fut: F) {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {limit:?}"));
}

/// Checks that the tenant's spend on the gateway is what the mock billed.
async fn assert_spend_is_the_bill(stack: &Stack, tenant: &str) {
    let billed = stack.mock().stats().billed_micro_usd;
    assert!(billed > 0, "the mock billed nothing: {:?}", stack.mock().stats());
    let spent = stack.tenant_spend(tenant).await;
    assert_eq!(
        spent,
        billed,
        "{tenant}'s costMicroUsdPerDay spend on the gateway against the mock's bill\n{}",
        stack.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_answers_through_the_gateway_and_its_tenant_pays_the_bill() {
    const TEST: &str = "agents::claude_code_answers_through_the_gateway_and_its_tenant_pays_the_bill";
    let Some(claude) = agent_bin(TEST, "claude") else {
        return;
    };
    bounded(Duration::from_secs(180), async {
        let stack = Stack::start(ROOMY_BUDGET).await;
        let run = stack.claude(&claude, "dev-alice", "say ok").await;
        assert_eq!(run.code, Some(0), "claude -p failed\n{run}\n{}", stack.log_tail());
        assert!(!run.stdout.trim().is_empty(), "claude printed no answer\n{run}");
        let stats = stack.mock().stats();
        assert!(
            stats.by_endpoint.get("/v1/messages").copied().unwrap_or(0) >= 1,
            "Claude Code's turn reached the mock's /v1/messages: {stats:?}"
        );
        assert_spend_is_the_bill(&stack, "dev-alice").await;
        assert_eq!(stack.tenant_spend("dev-bob").await, 0, "dev-bob paid nothing");
        stack.stop().await;
    })
    .await;
}

/// A mock phase in which `model` refuses every call at once: `529
/// overloaded_error` (Anthropic's wire) or `503` (OpenAI's).
fn storm_on(model: &str) -> pressure_mock::Behaviour {
    let mut phase = pressure_mock::Phase::normal("storm").on_models(&[model]);
    phase.overload_share = 1.0;
    pressure_mock::Behaviour { phases: vec![phase] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_through_the_gateway_and_its_tenant_pays_the_bill() {
    const TEST: &str = "agents::codex_answers_through_the_gateway_and_its_tenant_pays_the_bill";
    let Some(codex) = agent_bin(TEST, "codex") else {
        return;
    };
    bounded(Duration::from_secs(180), async {
        let stack = Stack::start(ROOMY_BUDGET).await;
        let run = stack.codex(&codex, "dev-bob", "say ok").await;
        assert_eq!(
            run.code,
            Some(0),
            "codex exec failed\n{run}\n{}",
            stack.log_tail()
        );
        assert!(!run.stdout.trim().is_empty(), "codex printed no answer\n{run}");
        let stats = stack.mock().stats();
        assert!(
            stats.by_endpoint.get("/v1/responses").copied().unwrap_or(0) >= 1,
            "Codex's turn reached the mock's /v1/responses: {stats:?}"
        );
        assert_spend_is_the_bill(&stack, "dev-bob").await;
        assert_eq!(stack.tenant_spend("dev-alice").await, 0, "dev-alice paid nothing");
        stack.stop().await;
    })
    .await;
}

/// The agent a test runs, its developer's key, and the mock endpoints of
/// its own wire and of its backup's.
#[derive(Debug, Clone, Copy)]
enum Agent {
    /// Claude Code: Anthropic first, OpenAI's chat completions as backup.
    Claude,
    /// Codex CLI: OpenAI's Responses first, Anthropic as backup.
    Codex,
}

impl Agent {
    /// The binary's name in `tools/agents`.
    fn bin(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
        }
    }

    /// The developer's API key (and tenant).
    fn key(self) -> &'static str {
        match self {
            Self::Claude => "dev-alice",
            Self::Codex => "dev-bob",
        }
    }

    /// The model of its primary, the mock endpoint of its primary and of
    /// its backup, and the model its backup answers as.
    fn chain(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Self::Claude => (CLAUDE_MODEL, "/v1/messages", "/v1/chat/completions", CODEX_MODEL),
            Self::Codex => (CODEX_MODEL, "/v1/responses", "/v1/messages", CLAUDE_MODEL),
        }
    }

    /// One run of the agent on `prompt` through `stack`.
    async fn run(self, stack: &Stack, bin: &std::path::Path, prompt: &str) -> stack::Run {
        match self {
            Self::Claude => stack.claude(bin, self.key(), prompt).await,
            Self::Codex => stack.codex(bin, self.key(), prompt).await,
        }
    }
}

/// `agent` in a storm on its primary (529 on Anthropic's wire, 503 on
/// OpenAI's): answered by the other vendor's backup, the primary tried no
/// more often than the backup answered (no retry storm).
async fn answered_by_the_backup_in_a_storm(test: &str, agent: Agent) {
    let Some(bin) = agent_bin(test, agent.bin()) else {
        return;
    };
    let (primary_model, primary, backup, backup_model) = agent.chain();
    bounded(Duration::from_secs(180), async {
        let stack = Stack::start(ROOMY_BUDGET).await;
        stack
            .mock()
            .set_behaviour(storm_on(primary_model))
            .expect("a storm");
        let run = agent.run(&stack, &bin, "say ok").await;
        assert_eq!(run.code, Some(0), "{agent:?} failed\n{run}\n{}", stack.log_tail());
        assert!(
            run.stdout.contains(backup_model),
            "the answer is the backup's (the mock names its model)\n{run}"
        );
        let stats = stack.mock().stats();
        let at = |endpoint: &str| stats.by_endpoint.get(endpoint).copied().unwrap_or(0);
        assert!(at(backup) >= 1, "the backup answered: {stats:?}");
        assert!(at(primary) >= 1, "the primary was tried: {stats:?}");
        assert!(at(primary) <= at(backup), "{stats:?}");
        stack.stop().await;
    })
    .await;
}

/// `agent` over a spent budget: it exits non-zero at once, `says` in its
/// output, after one request that reached no provider (no retry storm).
async fn stops_at_once_on_a_spent_budget(test: &str, agent: Agent, says: &str) {
    let Some(bin) = agent_bin(test, agent.bin()) else {
        return;
    };
    bounded(Duration::from_secs(180), async {
        let stack = Stack::start(ROOMY_BUDGET).await;
        stack.set_budget(agent.key(), SPENT_BUDGET).await;
        let run = agent.run(&stack, &bin, "say ok").await;
        assert_ne!(
            run.code,
            Some(0),
            "{agent:?} succeeded over a spent budget\n{run}"
        );
        assert!(run.all().contains(says), "{agent:?} did not say {says:?}\n{run}");
        assert_eq!(stack.mock().stats().requests, 0, "no call reached the provider");
        assert_eq!(
            stack.llm_calls().await,
            1,
            "one request, no retry storm\n{}",
            stack.log_tail()
        );
        assert_eq!(
            stack.gateway_requests_of(agent.key()).await,
            0,
            "the refused call gave its request back"
        );
        stack.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_is_answered_by_the_openai_backup_in_a_529_storm() {
    const TEST: &str = "agents::claude_code_is_answered_by_the_openai_backup_in_a_529_storm";
    answered_by_the_backup_in_a_storm(TEST, Agent::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_is_answered_by_the_anthropic_backup_in_a_storm() {
    const TEST: &str = "agents::codex_is_answered_by_the_anthropic_backup_in_a_storm";
    answered_by_the_backup_in_a_storm(TEST, Agent::Codex).await;
}

/// Claude Code obeys `x-should-retry: false` and prints the gateway's own
/// message after "API Error: Request rejected (429)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_stops_at_once_on_a_spent_budget_with_the_gateways_message() {
    const TEST: &str = "agents::claude_code_stops_at_once_on_a_spent_budget_with_the_gateways_message";
    stops_at_once_on_a_spent_budget(TEST, Agent::Claude, "costMicroUsdPerDay").await;
}

/// Codex stops only on `insufficient_quota`, and prints its own text for
/// it, not the gateway's message (fixtures/agents/README.md); anything else
/// it retries five times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_stops_at_once_on_a_spent_budget() {
    const TEST: &str = "agents::codex_stops_at_once_on_a_spent_budget";
    stops_at_once_on_a_spent_budget(TEST, Agent::Codex, "Quota exceeded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_sdk_creates_streams_and_uses_tools_through_the_gateway() {
    const TEST: &str = "agents::the_anthropic_python_sdk_creates_streams_and_uses_tools_through_the_gateway";
    // Building the venv downloads from the package index: a longer bound.
    bounded(Duration::from_secs(400), async {
        let Some(python) = sdk::python(TEST).await else {
            return;
        };
        let stack = Stack::start(ROOMY_BUDGET).await;
        let out = sdk::run_script(
            &python,
            "anthropic_sdk.py",
            &stack.proxy,
            "dev-alice",
            CLAUDE_MODEL,
        )
        .await;
        assert!(out.ok(), "anthropic_sdk.py failed\n{out}\n{}", stack.log_tail());
        // Non-streamed, streamed, and the two calls of the tool round trip.
        assert_eq!(stack.mock().stats().requests, 4, "{:?}", stack.mock().stats());
        assert_spend_is_the_bill(&stack, "dev-alice").await;
        stack.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_responses_create_streams_and_calls_functions_through_the_gateway() {
    const TEST: &str =
        "agents::the_openai_python_sdk_responses_create_streams_and_calls_functions_through_the_gateway";
    bounded(Duration::from_secs(400), async {
        let Some(python) = sdk::python(TEST).await else {
            return;
        };
        let stack = Stack::start(ROOMY_BUDGET).await;
        let out = sdk::run_script(
            &python,
            "openai_responses_sdk.py",
            &stack.proxy,
            "dev-bob",
            CODEX_MODEL,
        )
        .await;
        assert!(
            out.ok(),
            "openai_responses_sdk.py failed\n{out}\n{}",
            stack.log_tail()
        );
        assert_eq!(stack.mock().stats().requests, 4, "{:?}", stack.mock().stats());
        assert_spend_is_the_bill(&stack, "dev-bob").await;
        stack.stop().await;
    })
    .await;
}

/// The parts that need no agent endpoint: the mock and the gateway start
/// on this config, the tenants' keys are accepted and their budgets read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_starts_and_reads_the_tenants_budgets() {
    bounded(Duration::from_secs(60), async {
        let stack = Stack::start(ROOMY_BUDGET).await;
        assert_eq!(stack.tenant_spend("dev-alice").await, 0);
        stack.set_budget("dev-bob", SPENT_BUDGET).await;
        assert_eq!(stack.tenant_budget("dev-bob").await, Some(SPENT_BUDGET));
        assert_eq!(stack.tenant_budget("dev-alice").await, Some(ROOMY_BUDGET));
        stack.stop().await;
    })
    .await;
}
