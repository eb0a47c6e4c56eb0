//! `pressure mock-provider`: the chaos stand's misbehaving OpenAI-compatible provider.

/// Arguments of `pressure mock-provider` (filled in with the mock).
#[derive(Debug, clap::Args)]
pub(crate) struct MockProviderArgs {}

/// Runs the mock provider until interrupted.
pub(crate) async fn run(_args: MockProviderArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
