//! The shadow scorecard's own checkpoint file, beside the agent's state and never inside it:
//! an agent rolled back to a version without the scorecard reads the state file as before and
//! ignores this one. Versioned and checksummed as the state is (FNV-32a over a canonical dump).
use serde::{Deserialize, Serialize};

use super::{CheckpointError, canonical::checksum};
use crate::shadow::Scorecard;

/// The version this agent writes.
const SCORECARD_VERSION: u32 = 1;
/// The frozen schema name the checksum covers.
const SCHEMA: &str = "monitor.ShadowScorecard/1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScorecardFile {
    version: u32,
    scorecard: Scorecard,
    checksum: u32,
}

/// The file's bytes for `card`.
pub fn encode_scorecard(card: &Scorecard) -> Result<Vec<u8>, CheckpointError> {
    let file = ScorecardFile {
        version: SCORECARD_VERSION,
        scorecard: card.clone(),
        checksum: checksum(SCHEMA, card).map_err(CheckpointError::Encode)?,
    };
    serde_json::to_vec(&file).map_err(CheckpointError::Encode)
}

/// The scorecard in `bytes`, verified.
pub fn decode_scorecard(bytes: &[u8]) -> Result<Scorecard, CheckpointError> {
    let file: ScorecardFile = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
    if file.version != SCORECARD_VERSION {
        return Err(CheckpointError::BadVersion(file.version));
    }
    let actual = checksum(SCHEMA, &file.scorecard).map_err(CheckpointError::Encode)?;
    if actual != file.checksum {
        return Err(CheckpointError::ChecksumMismatch {
            part: SCORECARD_VERSION,
            expected: file.checksum,
            actual,
        });
    }
    Ok(file.scorecard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shadow::Outcome;

    fn card() -> Scorecard {
        let mut card = Scorecard::begun(1_700_000_000_000_000_000);
        card.counts.insert(Outcome::SamePod, 3);
        card.kubelet_leads_ns.push_back(8_100_000_000);
        card.counted_evictions.push_back("uid-1".into());
        card
    }

    #[test]
    fn a_scorecard_round_trips() {
        let bytes = encode_scorecard(&card()).unwrap();
        assert_eq!(decode_scorecard(&bytes).unwrap(), card());
    }

    #[test]
    fn a_changed_count_fails_its_checksum() {
        let text = String::from_utf8(encode_scorecard(&card()).unwrap()).unwrap();
        let damaged = text.replace("\"same_pod\":3", "\"same_pod\":4");
        assert_ne!(text, damaged, "the count is in the file");
        assert!(matches!(
            decode_scorecard(damaged.as_bytes()),
            Err(CheckpointError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn truncated_bytes_and_an_unknown_version_are_refused() {
        let bytes = encode_scorecard(&card()).unwrap();
        assert!(matches!(
            decode_scorecard(&bytes[..bytes.len() / 2]),
            Err(CheckpointError::Malformed(_))
        ));
        let text = String::from_utf8(bytes)
            .unwrap()
            .replace("\"version\":1", "\"version\":9");
        assert!(matches!(
            decode_scorecard(text.as_bytes()),
            Err(CheckpointError::BadVersion(9))
        ));
    }
}
