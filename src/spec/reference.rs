//! The memory figures carried over from the original system's `.rad` files: the spec's
//! `[reference]` table and the task's [`ReferenceMib`].

use serde::{Deserialize, Serialize};

/// The four memory figures a `.rad` file may carry, in MiB.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceMib {
    /// The job's actual peak memory per GPU, as the original system measured it.
    pub oracle: Option<u64>,
    /// The Horus formula's estimate.
    pub horus: Option<u64>,
    /// The FakeTensor trace's estimate.
    pub faketensor: Option<u64>,
    /// GPUMemNet's estimate (the upper edge of its bucket).
    pub gpumemnet: Option<u64>,
}

/// `[reference]` table of a spec file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceFile {
    /// [`ReferenceMib::oracle`], MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_mib: Option<u64>,
    /// [`ReferenceMib::horus`], MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub horus_mib: Option<u64>,
    /// [`ReferenceMib::faketensor`], MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faketensor_mib: Option<u64>,
    /// [`ReferenceMib::gpumemnet`], MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpumemnet_mib: Option<u64>,
}

impl ReferenceFile {
    pub(super) fn is_empty(&self) -> bool {
        self.oracle_mib.is_none()
            && self.horus_mib.is_none()
            && self.faketensor_mib.is_none()
            && self.gpumemnet_mib.is_none()
    }
}
