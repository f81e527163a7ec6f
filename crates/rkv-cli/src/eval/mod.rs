//! `rkv eval`: grading, math accuracy, fidelity of compressed decoding and passkey
//! retrieval through compressed prompts.

pub mod fidelity;
pub mod grade;
pub mod math;
pub mod passkey;
pub mod plot;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum EvalCmd {
    /// Grade existing outputs (`output` against `answer`, or the boxed answer of `solution`)
    Grade(grade::GradeArgs),
    /// Teacher-force real traces under FullKV and each policy x budget; KL, top-1, NLL
    Fidelity(fidelity::FidelityArgs),
    /// Generate answers to math problems with a KV policy and grade them (pass@1)
    Math(math::MathArgs),
    /// Find a number hidden in long filler under FullKV and each policy x budget x prompt
    /// mode (keep, compress); accuracy per configuration
    Passkey(passkey::PasskeyArgs),
}

impl EvalCmd {
    /// `--threads` of the commands that run a model.
    pub fn threads(&self) -> Option<usize> {
        match self {
            EvalCmd::Fidelity(a) => a.model.threads,
            EvalCmd::Grade(_) => None,
            EvalCmd::Math(a) => a.model.threads,
            EvalCmd::Passkey(a) => a.model.threads,
        }
    }
}

pub fn run(cmd: EvalCmd) -> Result<()> {
    match cmd {
        EvalCmd::Fidelity(a) => fidelity::run(a),
        EvalCmd::Grade(a) => grade::run(a),
        EvalCmd::Math(a) => math::run(a),
        EvalCmd::Passkey(a) => passkey::run(a),
    }
}
