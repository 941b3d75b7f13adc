//! The stat gate's policies over the same fakes: the programs off far from every threshold,
//! back on near one with every pod read, and the guard's reads spaced by the headroom.
use super::*;
use crate::{agent::stat_programs::StatPrograms, engine::attach_distance::AttachWithin};

/// The programs attached and detached so far, in order.
fn moves(asked: &RefCell<Vec<Asked>>) -> Vec<Asked> {
    asked
        .borrow()
        .iter()
        .filter(|a| matches!(a, Asked::Attach | Asked::Detach))
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_stat_programs_detach_far_from_every_threshold_and_attach_near_one_with_every_pod_read()
{
    let kernel = FakeKernel::default();
    let asked = kernel.asked.clone();
    let pods = [("web", 100, 200)];
    let flags = ["--attach-within", "1Gi"];
    let mut s = scene_with(Mode::DryRun, Some(kernel), &flags, &pods, 4000);
    asked.borrow_mut().clear();
    s.agent.move_stat_gate();
    assert_eq!(
        *asked.borrow(),
        [Asked::Detach],
        "3.6 GiB away, twice 1 GiB"
    );
    assert!(s.agent.stats_detached());
    s.agent.move_stat_gate();
    assert_eq!(asked.borrow().len(), 1, "no move while nothing changed");
    // The node nears the threshold and the pod grew while no program counted it.
    {
        let mut m = s.machine.0.borrow_mut();
        m.node_working_set = NODE - 900 * MI;
        m.pods
            .insert("/kubepods/burstable/poduid-web".into(), 700 * MI);
    }
    assert_eq!(s.input(Input::Guard), Next::Go);
    assert_eq!(moves(&asked), [Asked::Detach, Asked::Attach]);
    assert_eq!(
        s.agent.core.pod_working_set("uid-web"),
        Some(700 * MI),
        "every pod is read once the programs are back"
    );
}

#[tokio::test]
async fn by_default_the_stat_programs_detach_beyond_the_derived_distance_and_always_keeps_them() {
    let pods = [("web", 100, 200)];
    let kernel = FakeKernel::default();
    let asked = kernel.asked.clone();
    let mut s = scene_with(Mode::DryRun, Some(kernel), &[], &pods, 4000);
    // One CPU: 2 GiB/s over the 100ms guard read and a read of every pod (none timed here),
    // so the distance is 400 MiB, whatever machine runs the test.
    s.agent.stat_programs = StatPrograms::new(AttachWithin::Auto, 1);
    let distance = s.agent.attach_within().expect("auto derives a distance");
    assert!((400 * MI..410 * MI).contains(&distance), "{distance}");
    asked.borrow_mut().clear();
    s.agent.move_stat_gate();
    assert_eq!(*asked.borrow(), [Asked::Detach], "3.6 GiB away");
    // 350 MiB from the threshold: within the distance.
    s.machine.0.borrow_mut().node_working_set = NODE - 850 * MI;
    assert_eq!(s.input(Input::Guard), Next::Go);
    assert_eq!(moves(&asked), [Asked::Detach, Asked::Attach]);
    // The read of every pod was timed: the distance is now 2 GiB/s over 100ms and that read.
    assert_eq!(s.input(Input::Turn), Next::Go);
    let now = s.agent.attach_within().unwrap();
    assert!((200 * MI..distance).contains(&now), "{now}");
    assert_eq!(
        s.agent.visibility.metrics.stat_programs_attach_within,
        Some(now)
    );

    let kernel = FakeKernel::default();
    let asked = kernel.asked.clone();
    let mut s = scene_with(
        Mode::DryRun,
        Some(kernel),
        &["--attach-within", "always"],
        &pods,
        0,
    );
    asked.borrow_mut().clear();
    s.agent.move_stat_gate();
    assert!(asked.borrow().is_empty(), "8 GiB away, yet attached");
    assert_eq!(s.agent.attach_within(), None);
}

#[tokio::test]
async fn far_from_every_threshold_the_guard_reads_only_as_often_as_growth_could_bring_it_near() {
    let pods = [("web", 100, 200)];
    let mut s = scene_with(Mode::DryRun, Some(FakeKernel::default()), &[], &pods, 4000);
    // One CPU: 2 GiB/s over 200ms (the guard period and 100ms allowed for a read of every
    // pod, none timed here), a distance of 409.6 MiB.
    s.agent.stat_programs = StatPrograms::new(AttachWithin::Auto, 1);
    s.agent.move_stat_gate();
    let wait_after_read = |s: &mut Scene| {
        let read_ns = crate::system_clock::monotonic_ns();
        s.agent.read_guard();
        let due = s.agent.stat_programs.guard_due_ns();
        due.saturating_sub(read_ns) / 1_000_000
    };
    // 3.6 GiB away: 3.2 GiB to go at 2 GiB/s, and the guard period.
    let far = wait_after_read(&mut s);
    assert!((1690..=1710).contains(&far), "{far} ms");
    // 600 MiB away, 190.4 MiB beyond the distance: 93 ms of growth, and the period.
    s.machine.0.borrow_mut().node_working_set = NODE - 1100 * MI;
    let near = wait_after_read(&mut s);
    assert!((190..=196).contains(&near), "{near} ms");
    // A read that fails knows no headroom: the next one period later.
    s.machine.0.borrow_mut().node_fails = true;
    let failed = wait_after_read(&mut s);
    assert!((95..=105).contains(&failed), "{failed} ms");
}
