//! `monitor top`: a live view of a running agent, read from its `/debug/ranking` endpoint.
//!
//! A reader thread asks the agent every `--interval` and hands each answer (or why there was
//! none) to the terminal loop, which redraws at most [`REDRAW_AT_MOST_EVERY`] and reads keys
//! in between; an agent that goes away is shown as unreachable and asked again, so `top`
//! outlives agent restarts.
use std::{
    process::ExitCode,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::top_view::{Screen, View, draw};
use crate::{
    flags::{HostPort, host_port, positive_duration},
    http_get,
};

/// The fastest the screen is redrawn.
const REDRAW_AT_MOST_EVERY: Duration = Duration::from_millis(250);
/// How long one read of the agent may take.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest ranking view read: 20 pods of each signal's ranking and 20 decisions take
/// tens of kilobytes.
const MAX_VIEW_BYTES: usize = 4 << 20;

/// Watch a running agent: each signal against its thresholds, the head of the ranking with
/// why each pod is where it is, the recent decisions, the kernel event rate and losses.
///
/// Keys: `s` (or Tab) shows the next signal's ranking, `n` filters the ranking by each
/// namespace in turn and then none, `q` (or Esc, Ctrl-C) quits. The agent must serve its
/// endpoints (`--metrics-addr`, on by default); while it cannot be reached, the last view
/// stays on screen marked "agent unreachable, retrying".
#[derive(Args, Debug)]
pub(crate) struct TopArgs {
    /// The agent's metrics address (its `--metrics-addr`): HOST:PORT, the host an IP address
    /// or a name (localhost:9753), each of its addresses tried in turn.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9753", value_parser = host_port)]
    pub addr: HostPort,
    /// How often the agent is asked (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = positive_duration)]
    pub interval: Duration,
}

pub(crate) fn run(args: TopArgs) -> anyhow::Result<ExitCode> {
    let (reads, answers) = mpsc::channel();
    let (addr, interval) = (args.addr, args.interval);
    let shown = addr.to_string();
    std::thread::spawn(move || {
        loop {
            let read = read_view(&addr);
            if reads.send((Instant::now(), read)).is_err() {
                return;
            }
            std::thread::sleep(interval);
        }
    });
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let shown = show(&mut terminal, &answers, Screen::new(shown));
    ratatui::restore();
    shown.map(|()| ExitCode::SUCCESS)
}

/// Runs the screen until a quit key.
fn show(
    terminal: &mut ratatui::DefaultTerminal,
    answers: &mpsc::Receiver<(Instant, Result<View, String>)>,
    mut screen: Screen,
) -> anyhow::Result<()> {
    let mut dirty = true;
    let mut drawn_at: Option<Instant> = None;
    loop {
        while let Ok((at, read)) = answers.try_recv() {
            screen.update(at, read);
            dirty = true;
        }
        if dirty && drawn_at.is_none_or(|t| t.elapsed() >= REDRAW_AT_MOST_EVERY) {
            terminal.draw(|frame| draw(frame, &screen))?;
            drawn_at = Some(Instant::now());
            dirty = false;
        }
        if !event::poll(Duration::from_millis(50))? {
            continue;
        }
        let Event::Key(key) = event::read()? else {
            dirty = true;
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
            KeyCode::Char('s') | KeyCode::Tab => screen.next_signal(),
            KeyCode::Char('n') => screen.next_namespace(),
            _ => continue,
        }
        dirty = true;
    }
}

/// One `GET /debug/ranking`, parsed; the error in words. The answer is bounded in time and
/// size, so whatever answers at the address cannot hold `top` or grow its memory.
fn read_view(addr: &HostPort) -> Result<View, String> {
    let reply = http_get::get_first(addr.addrs(), "/debug/ranking", READ_TIMEOUT, MAX_VIEW_BYTES)
        .map_err(|e| e.to_string())?;
    if reply.status != 200 {
        return Err(format!("the agent answered {}", reply.status));
    }
    serde_json::from_slice(&reply.body).map_err(|e| format!("not a ranking view: {e}"))
}
