//! `--predict` (opt-in): a pod racing toward a hard threshold is evicted before the crossing,
//! on the growth the kernel programs report; without the flag the agent keeps the kubelet's
//! rule and decides only once the threshold is met. The racer stops 30 MiB short of the
//! threshold, so the same race shows both: with the flag it is evicted (the price of acting on
//! a projection), without it nothing happens.
use std::time::Duration;

use tests::{AgentScene, TestPod, running_as_root};

/// Below the scene's pressure point (200 MiB of kubepods working set), allocated at once.
const RACE_MIB: usize = 170;

#[test]
fn predict_evicts_a_racing_pod_before_the_crossing_and_only_with_the_flag() {
    if !running_as_root("predict_evicts_a_racing_pod_before_the_crossing_and_only_with_the_flag") {
        return;
    }
    for predict in [false, true] {
        let scene = AgentScene::new(&format!("agent-predict-{predict}"), "10s", "5s");
        let racer = TestPod::new("racer").request_mib(20);
        // A lead long enough for the emulated VM's slower allocation too.
        let args: &[&str] = if predict {
            &["--dry-run", "--predict", "1s"]
        } else {
            &["--dry-run"]
        };
        let agent = scene.start_agent(args);
        let mut racer_proc = scene.start_pod(&racer);
        racer_proc.alloc(RACE_MIB);
        if predict {
            let decision = agent.next_decision(Duration::from_secs(10));
            assert_eq!(decision["uid"], racer.uid.as_str(), "{decision:#}");
            // Taken before the crossing: what is available now is above the threshold, the
            // projection below it.
            let predicted = &decision["predicted"];
            assert_eq!(predicted["lead_ms"], 1000, "{decision:#}");
            let threshold = decision["threshold"].as_i64().expect("threshold");
            assert!(
                predicted["available_now"].as_i64().expect("available_now") >= threshold,
                "met when decided: {decision:#}"
            );
            assert!(
                decision["observed"].as_i64().expect("observed") < threshold,
                "{decision:#}"
            );
        } else {
            // The kubelet's rule: the threshold is never met, so nothing is decided.
            assert_eq!(
                agent.next_line(Duration::from_secs(3)),
                None,
                "a decision without a crossing:\n{}",
                agent.stderr()
            );
        }
    }
}
