//! `pressure triage eval`: the accuracy of each degradation level of the
//! triage example on its golden dataset.

/// Arguments of `pressure triage` (filled in with the example).
#[derive(Debug, clap::Args)]
pub(crate) struct TriageArgs {}

/// Runs the triage subcommand.
pub(crate) async fn run(_args: TriageArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
