//! What `monitor top` shows, and how: the agent's `/debug/ranking` answer as the client
//! reads it, the screen's state (the signal shown, the namespace filter, the last error),
//! and its rendering with ratatui. Pure, so it is tested on ratatui's test backend.
use std::time::Instant;

use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    style::{Modifier, Style},
    text::Line,
    widgets::{Block, Paragraph, Row, Table},
};
use serde::Deserialize;

use crate::{engine::printable::printable, engine::units::bytes};

/// `/debug/ranking`, the fields `top` uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct View {
    pub signals: Vec<SignalView>,
    pub rankings: Vec<RankingView>,
    pub decisions: Vec<DecisionView>,
    pub source: SourceView,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignalView {
    pub signal: String,
    pub available: i64,
    pub capacity: i64,
    pub thresholds: Vec<ThresholdView>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThresholdView {
    pub kind: String,
    pub value: i64,
    pub met: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RankingView {
    pub signal: String,
    pub pods_total: usize,
    pub head: Vec<RankedPod>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RankedPod {
    pub rank: usize,
    pub namespace: String,
    pub name: String,
    pub priority: i32,
    #[serde(default)]
    pub exceeds_request: Option<bool>,
    /// An exact quantity: an integer when whole.
    #[serde(default)]
    pub above_request: Option<serde_json::Value>,
    pub why: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionView {
    pub text: String,
    pub outcome: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SourceView {
    pub description: String,
    pub events_received: u64,
    pub events_lost: u64,
}

/// What the screen shows between redraws.
#[derive(Debug, Default)]
pub(crate) struct Screen {
    pub addr: String,
    /// The last view read, kept while the agent is unreachable.
    pub view: Option<View>,
    /// Why the last read failed, until one succeeds.
    pub error: Option<String>,
    /// Index into the view's rankings.
    pub signal: usize,
    /// Whether a key chose the signal; until then the one under pressure is shown.
    signal_chosen: bool,
    /// Only pods of this namespace, when set.
    pub namespace: Option<String>,
    /// Kernel events per second between the last two reads.
    pub event_rate: Option<f64>,
    last_read: Option<(Instant, u64)>,
}

impl Screen {
    pub(crate) fn new(addr: String) -> Self {
        Self {
            addr,
            ..Self::default()
        }
    }

    /// Takes a read of `/debug/ranking` made at `at`.
    pub(crate) fn update(&mut self, at: Instant, read: Result<View, String>) {
        match read {
            Ok(view) => {
                let received = view.source.events_received;
                self.event_rate = match self.last_read {
                    Some((then, before)) if at > then && received >= before => {
                        Some((received - before) as f64 / (at - then).as_secs_f64())
                    }
                    _ => None,
                };
                self.last_read = Some((at, received));
                if !self.signal_chosen {
                    self.signal = pressing_signal(&view);
                }
                self.view = Some(view);
                self.error = None;
            }
            Err(error) => {
                self.error = Some(error);
                self.last_read = None;
                self.event_rate = None;
            }
        }
    }

    /// Shows the next signal's ranking.
    pub(crate) fn next_signal(&mut self) {
        self.signal_chosen = true;
        let count = self.view.as_ref().map_or(0, |v| v.rankings.len()).max(1);
        self.signal = (self.signal + 1) % count;
    }

    /// Cycles the namespace filter: all, then each namespace of the shown head, then all.
    pub(crate) fn next_namespace(&mut self) {
        let mut namespaces: Vec<&str> = self
            .ranking()
            .map(|r| r.head.iter().map(|p| p.namespace.as_str()).collect())
            .unwrap_or_default();
        namespaces.sort_unstable();
        namespaces.dedup();
        let next = match &self.namespace {
            None => namespaces.first(),
            Some(current) => namespaces
                .iter()
                .position(|n| n == current)
                .and_then(|i| namespaces.get(i + 1)),
        };
        self.namespace = next.map(ToString::to_string);
    }

    fn ranking(&self) -> Option<&RankingView> {
        let rankings = &self.view.as_ref()?.rankings;
        rankings.get(self.signal.min(rankings.len().saturating_sub(1)))
    }
}

/// The ranking to show first: that of a signal whose threshold is met, else of one with a
/// threshold, else the first.
fn pressing_signal(view: &View) -> usize {
    let position = |wanted: &dyn Fn(&SignalView) -> bool| {
        view.rankings.iter().position(|r| {
            view.signals
                .iter()
                .any(|s| s.signal == r.signal && wanted(s))
        })
    };
    position(&|s| s.thresholds.iter().any(|t| t.met))
        .or_else(|| position(&|s| !s.thresholds.is_empty()))
        .unwrap_or(0)
}

/// Draws the whole screen.
pub(crate) fn draw(frame: &mut Frame<'_>, screen: &Screen) {
    let signals = screen.view.as_ref().map_or(0, |v| v.signals.len()) as u16;
    let decisions = screen.view.as_ref().map_or(0, |v| v.decisions.len()).min(8) as u16;
    let [header, signal_area, ranking_area, decision_area] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(signals + 2),
        Constraint::Min(5),
        Constraint::Length(decisions.max(1) + 2),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(header_lines(screen)), header);
    let Some(view) = &screen.view else {
        return;
    };
    let bar_width = usize::from(signal_area.width.saturating_sub(2)).clamp(10, 200) / 3;
    let signal_lines: Vec<Line<'_>> = view
        .signals
        .iter()
        .map(|s| Line::from(signal_line(s, bar_width)))
        .collect();
    frame.render_widget(
        Paragraph::new(signal_lines).block(Block::bordered().title(" signals ")),
        signal_area,
    );
    render_ranking(frame, screen, ranking_area);
    let decision_lines: Vec<Line<'_>> = if view.decisions.is_empty() {
        vec![Line::from("none yet")]
    } else {
        view.decisions
            .iter()
            .rev()
            .take(usize::from(decisions))
            .map(|d| {
                let outcome = d.outcome.as_deref().unwrap_or("in progress");
                Line::from(format!("{} -> {}", printable(&d.text), printable(outcome)))
            })
            .collect()
    };
    frame.render_widget(
        Paragraph::new(decision_lines).block(Block::bordered().title(" recent decisions ")),
        decision_area,
    );
}

fn header_lines(screen: &Screen) -> Vec<Line<'static>> {
    let status = match (&screen.error, &screen.view) {
        (Some(error), _) => format!("agent unreachable, retrying ({error})"),
        (None, None) => "connecting".to_string(),
        (None, Some(view)) => {
            let rate = screen
                .event_rate
                .map_or("-".to_string(), |r| format!("{r:.0}/s"));
            format!(
                "source {} | kernel events {rate}, {} lost",
                view.source.description, view.source.events_lost
            )
        }
    };
    vec![
        Line::from(format!("monitor top  {}  {status}", screen.addr))
            .style(Style::new().add_modifier(Modifier::BOLD)),
        Line::from("keys: s next signal, n namespace filter, q quit"),
    ]
}

/// `memory.available [#####-----|---] 1.2Gi of 8.0Gi free; hard <100.0Mi met`: the bar
/// fills with what is used, `|` marks where each threshold is met.
fn signal_line(signal: &SignalView, width: usize) -> String {
    let amount = |v: i64| {
        if signal.signal == "pid.available" {
            v.to_string()
        } else {
            bytes(v)
        }
    };
    let capacity = signal.capacity.max(1);
    let cell = |v: i64| (v.clamp(0, capacity) as f64 / capacity as f64 * width as f64) as usize;
    let used = cell(capacity - signal.available);
    let mut bar: Vec<char> = (0..width)
        .map(|i| if i < used { '#' } else { '-' })
        .collect();
    for threshold in &signal.thresholds {
        if let Some(c) = bar.get_mut(cell(capacity - threshold.value).min(width - 1)) {
            *c = '|';
        }
    }
    let thresholds: Vec<String> = signal
        .thresholds
        .iter()
        .map(|t| {
            format!(
                "{} <{}{}",
                t.kind,
                amount(t.value),
                if t.met { " MET" } else { "" }
            )
        })
        .collect();
    format!(
        "{:<27} [{}] {} of {} free; {}",
        signal.signal,
        bar.into_iter().collect::<String>(),
        amount(signal.available),
        amount(signal.capacity),
        if thresholds.is_empty() {
            "no threshold".to_string()
        } else {
            thresholds.join(", ")
        }
    )
}

/// The ranking's columns.
const RANKING_HEADER: [&str; 6] = ["#", "POD", "EXCEEDS", "PRIORITY", "ABOVE-REQUEST", "WHY"];

/// Each column as wide as its widest cell or its header, so no number is cut (a
/// system-node-critical priority is 2000001000; the lowest is -2147483648).
fn column_widths<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> [u16; N] {
    std::array::from_fn(|i| {
        let widest = rows
            .iter()
            .map(|row| row[i].chars().count())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0);
        u16::try_from(widest).unwrap_or(u16::MAX)
    })
}

fn render_ranking(frame: &mut Frame<'_>, screen: &Screen, area: ratatui::layout::Rect) {
    let Some(ranking) = screen.ranking() else {
        frame.render_widget(
            Paragraph::new("no ranking").block(Block::bordered().title(" ranking ")),
            area,
        );
        return;
    };
    let title = format!(
        " ranking for {} ({} pods{}) ",
        ranking.signal,
        ranking.pods_total,
        screen
            .namespace
            .as_ref()
            .map_or(String::new(), |n| format!(", namespace {}", printable(n)))
    );
    let money = |v: &serde_json::Value| match v.as_i64() {
        Some(n) if ranking.signal != "pid.available" => bytes(n),
        _ => v.to_string(),
    };
    let cells: Vec<[String; 6]> = ranking
        .head
        .iter()
        .filter(|p| screen.namespace.as_ref().is_none_or(|n| *n == p.namespace))
        .map(|p| {
            [
                p.rank.to_string(),
                format!("{}/{}", printable(&p.namespace), printable(&p.name)),
                match p.exceeds_request {
                    Some(true) => "yes".to_string(),
                    Some(false) => "no".to_string(),
                    None => "-".to_string(),
                },
                p.priority.to_string(),
                p.above_request.as_ref().map_or("-".to_string(), money),
                printable(&p.why).to_string(),
            ]
        })
        .collect();
    let widths = column_widths(&RANKING_HEADER, &cells);
    let table = Table::new(
        cells.into_iter().map(Row::new),
        [
            Constraint::Length(widths[0]),
            // A name up to 64 columns (namespace and name together may hold 316).
            Constraint::Length(widths[1].min(64)),
            Constraint::Length(widths[2]),
            Constraint::Length(widths[3]),
            Constraint::Length(widths[4]),
            // The reason takes the rest, and gives way first on a narrow screen.
            Constraint::Fill(1),
        ],
    )
    .header(Row::new(RANKING_HEADER).style(Style::new().add_modifier(Modifier::BOLD)))
    .block(Block::bordered().title(title));
    frame.render_widget(table, area);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ratatui::{Terminal, backend::TestBackend};

    use super::*;

    const MIB: i64 = 1 << 20;

    fn view() -> View {
        serde_json::from_value(serde_json::json!({
            "signals": [{
                "signal": "allocatableMemory.available", "available": 80 * MIB,
                "capacity": 300 * MIB,
                "thresholds": [{"kind": "hard", "value": 100 * MIB, "met": true,
                                "gracePeriodSeconds": 0}]
            }],
            "rankings": [
                {"signal": "allocatableMemory.available", "podsTotal": 2, "head": [
                    {"rank": 1, "namespace": "jobs", "name": "hog", "uid": "u1", "priority": 0,
                     "critical": false, "hasStats": true, "usage": 230 * MIB,
                     "request": 20 * MIB, "exceedsRequest": true, "aboveRequest": 210 * MIB,
                     "afterPreviousBy": null, "why": "exceeds its request"},
                    {"rank": 2, "namespace": "web", "name": "calm", "uid": "u2",
                     "priority": 0, "critical": false, "hasStats": true, "usage": 5 * MIB,
                     "request": 100 * MIB, "exceedsRequest": false,
                     "aboveRequest": -95 * MIB, "afterPreviousBy": "exceeds-request",
                     "why": "within its request; after #1: pods over their request go first"}
                ]},
                {"signal": "pid.available", "podsTotal": 0, "head": []}
            ],
            "decisions": [{"text": "would evict jobs/hog: allocatableMemory.available 80.0Mi < 100.0Mi",
                           "outcome": "dry-run: nothing done", "name": "hog"}],
            "source": {"description": "ebpf (9/9 kernel programs)", "eventsReceived": 100,
                       "eventsLost": 3, "eventsUndecodable": 0}
        }))
        .expect("a /debug/ranking answer")
    }

    fn rendered(screen: &Screen) -> String {
        let mut terminal = Terminal::new(TestBackend::new(140, 30)).unwrap();
        terminal.draw(|frame| draw(frame, screen)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn shows_signals_ranking_decisions_and_event_rate() {
        let mut screen = Screen::new("127.0.0.1:9753".into());
        let start = Instant::now();
        let mut first = view();
        first.source.events_received = 0;
        screen.update(start, Ok(first));
        screen.update(start + Duration::from_secs(2), Ok(view()));
        let text = rendered(&screen);
        for want in [
            "kernel events 50/s, 3 lost",
            "allocatableMemory.available",
            "80.0Mi of 300.0Mi free; hard <100.0Mi MET",
            "ranking for allocatableMemory.available (2 pods)",
            "jobs/hog",
            "exceeds its request",
            "web/calm",
            "after #1: pods over their request go first",
            "210.0Mi",
            "-95.0Mi",
            "would evict jobs/hog",
            "-> dry-run: nothing done",
        ] {
            assert!(text.contains(want), "{want:?} missing in\n{text}");
        }
        // 220Mi of 300Mi used fills 73 % of the bar; the threshold sits at 67 %.
        let bar = text
            .lines()
            .find(|l| l.contains("allocatableMemory.available ["))
            .unwrap();
        let inside = bar.split('[').nth(1).unwrap().split(']').next().unwrap();
        let mark = inside.find('|').unwrap() as f64 / inside.len() as f64;
        assert!((0.6..0.7).contains(&mark), "{bar}");
        assert!(inside.starts_with("####"), "{bar}");
    }

    #[test]
    fn wide_priorities_and_quantities_are_shown_whole() {
        let mut view = view();
        let head = &mut view.rankings[0].head;
        head[0].priority = 2_000_001_000;
        head[1].priority = i32::MIN;
        head[1].above_request = Some(serde_json::json!(-(1_i64 << 50)));
        head[1].rank = 10_000;
        let mut screen = Screen::new("a".into());
        screen.update(Instant::now(), Ok(view));
        let text = rendered(&screen);
        let row = |pod: &str| {
            text.lines()
                .find(|l| l.contains(pod))
                .unwrap_or_else(|| panic!("no {pod} in\n{text}"))
                .to_string()
        };
        let hog = row("jobs/hog");
        assert!(hog.contains(" 2000001000 "), "{hog}");
        let calm = row("web/calm");
        for whole in ["10000 ", " -2147483648 ", " -1.0Pi "] {
            assert!(calm.contains(whole), "{whole:?} in {calm}");
        }
        assert!(calm.contains("within its request"), "{calm}");
    }

    #[test]
    fn keys_switch_signal_and_filter_by_namespace() {
        let mut screen = Screen::new("a".into());
        screen.update(Instant::now(), Ok(view()));
        type Key = fn(&mut Screen);
        let cases: [(&str, Key, &str, &str); 4] = [
            (
                "namespace jobs",
                Screen::next_namespace,
                "jobs/hog",
                "web/calm",
            ),
            (
                "namespace web",
                Screen::next_namespace,
                "web/calm",
                "exceeds its request",
            ),
            (
                "all again",
                Screen::next_namespace,
                "(2 pods)",
                ", namespace",
            ),
            (
                "next signal",
                Screen::next_signal,
                "ranking for pid.available",
                "exceeds its",
            ),
        ];
        for (name, key, shown, hidden) in cases {
            key(&mut screen);
            let text = rendered(&screen);
            assert!(text.contains(shown), "{name}: {shown:?} missing in\n{text}");
            assert!(
                !text.contains(hidden),
                "{name}: {hidden:?} shown in\n{text}"
            );
        }
    }

    #[test]
    fn the_signal_under_pressure_is_shown_first() {
        let mut view = view();
        view.rankings.rotate_left(1);
        assert_eq!(view.rankings[0].signal, "pid.available");
        let mut screen = Screen::new("a".into());
        screen.update(Instant::now(), Ok(view));
        let text = rendered(&screen);
        assert!(
            text.contains("ranking for allocatableMemory.available"),
            "{text}"
        );
    }

    #[test]
    fn an_unreachable_agent_keeps_the_last_view_and_says_so() {
        let mut screen = Screen::new("127.0.0.1:9753".into());
        screen.update(Instant::now(), Ok(view()));
        screen.update(Instant::now(), Err("connection refused".into()));
        let text = rendered(&screen);
        assert!(
            text.contains("agent unreachable, retrying (connection refused)"),
            "{text}"
        );
        assert!(text.contains("jobs/hog"), "{text}");
    }
}
