//! The shapes carma 0.4 added (issue 23's mail types). Frozen.

use serde::{Deserialize, Serialize};

/// What a submission asks to be told beyond [`SpecV2`](super::SpecV2)'s `mail_user`: sbatch's
/// `--mail-type` in its canonical text (`BEGIN,END,TIME_LIMIT_80`, `NONE`, or empty for the
/// default END). Carried next to the `SpecV2` and the [`TimingV3`](super::TimingV3) by
/// `SubmittedV4`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MailV4 {
    /// The `--mail-type` list in canonical text (empty: the default END); frozen.
    pub types: String,
}
