//! `pressure chaos`: loads the whole stack per scenario and writes the report.

/// Arguments of `pressure chaos` (filled in with the driver).
#[derive(Debug, clap::Args)]
pub(crate) struct ChaosArgs {}

/// Runs the chaos scenarios; the exit code says whether every criterion passed.
pub(crate) async fn run(_args: ChaosArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
