//! The drill report as a reader sees it: an example drill (two branches, a fault and a restore
//! marker, the stable name, two alarms, hundreds of attempts with two failure classes) rendered
//! to `report.html` and opened in headless Chromium (Debian's `chromium`, offline), whose
//! screenshot must show ink in every lane's band, where `report::svg`'s layout puts it, and
//! nothing outside the lanes.
//!
//! `READYPROBE_WRITE_SCREENSHOT=docs/drill-report.png` also writes the cropped screenshot of the
//! first timeline for the docs; `READYPROBE_SCREENSHOT_SOURCE=DIR/report.html` takes that
//! screenshot of an existing report (a real drill's) instead of the example.

use super::support::skip_or_panic;
use readyprobe::readiness::{Millis, ReadinessState};
use readyprobe::report::html::render;
use readyprobe::report::model::{
    AlarmLane, AttemptMark, Band, BranchLane, Drill, Episode, EpisodeKind, Event, Marker, Phase,
    Round, ServiceDrill, Source, Span, StableLane,
};
use readyprobe::report::svg::{self, LaneKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 2026-12-01T10:00:00Z, ms.
const T0: Millis = 1_796_119_200_000;
const MIN: Millis = 60_000;
/// The browser window, px; the example's first timeline fits in it.
const WINDOW: (u32, u32) = (1400, 1000);

fn span(from: Millis, until: Millis) -> Span {
    Span {
        from: T0 + from,
        until: T0 + until,
    }
}

fn band<S>(from: Millis, until: Millis, state: S) -> Band<S> {
    Band {
        span: span(from, until),
        state,
    }
}

/// Attempts every 2 s over 20 minutes, the class of each given by `class(offset ms)`.
fn attempts(class: impl Fn(Millis) -> Option<&'static str>) -> Vec<AttemptMark> {
    (1..600)
        .map(|i| i * 2_000)
        .map(|t| AttemptMark {
            at: T0 + t,
            class: class(t).map(str::to_string),
        })
        .collect()
}

fn phase(name: &str, at: Option<Millis>, start: Millis, prev: Millis) -> Phase {
    Phase {
        name: name.into(),
        at: at.map(|t| T0 + t),
        since_start_ms: at.map(|t| t - start),
        took_ms: at.map(|t| t - prev),
        note: at
            .is_none()
            .then(|| "no record: the alarm history was not read (--alarms)".to_string()),
    }
}

fn branch_lanes() -> Vec<BranchLane> {
    use ReadinessState::*;
    let primary = BranchLane {
        name: "orders-db-primary.cluster-abc.eu-west-1.rds.amazonaws.com".into(),
        role: Some("PRIMARY".into()),
        // Writes fail from the fault (5 m) to the restore (12 m); between 7 and 9 m some
        // attempts time out instead.
        attempts: attempts(|t| match t {
            t if (7 * MIN..9 * MIN).contains(&t) && t % 10_000 == 0 => Some("tcp_timeout"),
            t if (5 * MIN..12 * MIN).contains(&t) => Some("server_read_only"),
            _ => None,
        }),
        states: vec![
            band(0, MIN / 2, Unknown),
            band(MIN / 2, 5 * MIN + 40_000, Ready),
            band(5 * MIN + 40_000, 12 * MIN + 50_000, Unready),
            band(12 * MIN + 50_000, 15 * MIN, PendingApproval),
            band(15 * MIN, 20 * MIN, Ready),
        ],
        published: vec![
            band(0, MIN / 2, None),
            band(MIN / 2, 5 * MIN + 40_000, Some(1.0)),
            band(5 * MIN + 40_000, 15 * MIN, Some(0.0)),
            band(15 * MIN, 20 * MIN, Some(1.0)),
        ],
        overrides: vec![],
        events: vec![Event {
            at: T0 + 15 * MIN,
            label: "failback approved by bob: \"writer verified\"".into(),
        }],
    };
    let secondary = BranchLane {
        name: "orders-db-secondary.cluster-def.eu-west-2.rds.amazonaws.com".into(),
        role: Some("SECONDARY".into()),
        attempts: attempts(|t| (t % 170_000 == 0).then_some("tcp_timeout")),
        states: vec![band(0, MIN / 2, Unknown), band(MIN / 2, 20 * MIN, Ready)],
        published: vec![band(0, MIN / 2, None), band(MIN / 2, 20 * MIN, Some(1.0))],
        overrides: vec![band(
            13 * MIN,
            14 * MIN,
            "ready by carol <change 42>".to_string(),
        )],
        events: vec![],
    };
    vec![primary, secondary]
}

fn stable_lane(primary: &str, secondary: &str) -> StableLane {
    let rounds = (0..120)
        .map(|i| i * 10_000)
        .map(|t| {
            let selected = if (6 * MIN + 30_000..16 * MIN).contains(&t) {
                secondary
            } else {
                primary
            };
            Round {
                at: T0 + t,
                selected: Some(selected.to_string()),
                unknown_target: false,
                ttl: Some(60),
                end_to_end: Some(
                    (5 * MIN..6 * MIN + 50_000)
                        .contains(&t)
                        .then(|| "server_read_only".to_string()),
                ),
            }
        })
        .collect();
    StableLane {
        name: "mysql.orders.internal.example".into(),
        rounds,
    }
}

fn episodes(primary: &str) -> Vec<Episode> {
    let failover = Episode {
        kind: EpisodeKind::Failover,
        branch: primary.into(),
        trigger: "fault marker \"blocked writer path\"".into(),
        phases: vec![
            phase("fault marker", Some(5 * MIN), 5 * MIN, 5 * MIN),
            phase(
                "first failed attempt",
                Some(5 * MIN + 2_000),
                5 * MIN,
                5 * MIN,
            ),
            phase(
                "readiness 0 published",
                Some(5 * MIN + 40_000),
                5 * MIN,
                5 * MIN + 2_000,
            ),
            phase("alarm in ALARM", Some(6 * MIN), 5 * MIN, 5 * MIN + 40_000),
            phase(
                "stable name answers secondary",
                Some(6 * MIN + 30_000),
                5 * MIN,
                6 * MIN,
            ),
            phase("first successful end-to-end attempt", None, 5 * MIN, 0),
        ],
        pending_approval_ms: None,
        approved_by: None,
    };
    let failback = Episode {
        kind: EpisodeKind::Failback,
        branch: primary.into(),
        trigger: "restore marker \"writer path restored\"".into(),
        phases: vec![
            phase("restore marker", Some(12 * MIN), 12 * MIN, 12 * MIN),
            phase(
                "pending approval",
                Some(12 * MIN + 50_000),
                12 * MIN,
                12 * MIN,
            ),
            phase(
                "readiness 1 published",
                Some(15 * MIN),
                12 * MIN,
                12 * MIN + 50_000,
            ),
            phase(
                "stable name answers primary",
                Some(16 * MIN),
                12 * MIN,
                15 * MIN,
            ),
        ],
        pending_approval_ms: Some(2 * MIN + 10_000),
        approved_by: Some("bob".into()),
    };
    vec![failover, failback]
}

/// The example drill the screenshot shows.
fn example() -> Drill {
    let branches = branch_lanes();
    let (primary, secondary) = (branches[0].name.clone(), branches[1].name.clone());
    let alarm = |name: &str, branch: &str, alarm: Option<(Millis, Millis)>| {
        let mut states = vec![band(0, MIN, "INSUFFICIENT_DATA".to_string())];
        match alarm {
            Some((from, until)) => states.extend([
                band(MIN, from, "OK".to_string()),
                band(from, until, "ALARM".to_string()),
                band(until, 20 * MIN, "OK".to_string()),
            ]),
            None => states.push(band(MIN, 20 * MIN, "OK".to_string())),
        }
        AlarmLane {
            name: name.into(),
            branch: branch.into(),
            target: None,
            states,
        }
    };
    let marker = |at, kind: &str, label: &str| Marker {
        at: T0 + at,
        kind: kind.into(),
        label: label.into(),
        by: "alice".into(),
    };
    Drill {
        source: Source::Drill {
            files: vec!["evidence-a.jsonl".into(), "evidence-b.jsonl".into()],
        },
        window: span(0, 20 * MIN),
        probers: vec!["prober-a".into(), "prober-b".into()],
        services: vec![ServiceDrill {
            name: "orders-db".into(),
            config: vec![
                ("config".into(), "probes/orders-db.toml".into()),
                (
                    "policy".into(),
                    "unready below 95 % over 60s (min 10) for 30s; ready at 99 % over 5m for 2m, approval required".into(),
                ),
                ("probe interval".into(), "2s (timeout 1500ms)".into()),
                ("publish interval".into(), "10s".into()),
                ("stable-name TTLs seen".into(), "60s".into()),
            ],
            stable_name: Some(stable_lane(&primary, &secondary)),
            alarms: vec![
                alarm(
                    "orders-db-primary-ready",
                    &primary,
                    Some((6 * MIN, 15 * MIN + 30_000)),
                ),
                alarm("orders-db-secondary-ready", &secondary, None),
            ],
            markers: vec![
                marker(5 * MIN, "fault", "blocked writer path"),
                marker(12 * MIN, "restore", "writer path restored"),
            ],
            episodes: episodes(&primary),
            branches,
        }],
        problems: vec!["evidence-b.jsonl line 412: record_seq jumps from 411 to 415".into()],
    }
}

/// The Chromium binary, or `None` (after `skip_or_panic`) when it is not installed.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        skip_or_panic("chromium (Debian package `chromium`; infra/local/test.sh installs it)");
    }
    found
}

/// Run headless Chromium on `page` with `mode` (`--dump-dom` or `--screenshot=FILE`), offline
/// (every host name resolves to nothing, no background fetches); stdout on success. Panics
/// after 120 s or on failure, with Chromium's stderr.
fn run_chromium(
    chrome: &Path,
    profile: &Path,
    window: (u32, u32),
    mode: &str,
    page: &Path,
) -> String {
    let mut child = Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-extensions",
            "--disable-sync",
            "--no-first-run",
            "--no-default-browser-check",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", window.0, window.1))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait for chromium").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium {mode} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("chromium output");
    assert!(
        out.status.success(),
        "chromium {mode} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where the page's first timeline `<svg>` is drawn, px: (left, top, width, height). Measured
/// in the browser: a copy of the page with a script that writes the box into the DOM, dumped.
fn timeline_box(chrome: &Path, dir: &Path, html: &str, window: (u32, u32)) -> [f64; 4] {
    let probe = dir.join("probe.html");
    let script = "<script>const r=document.querySelector('svg.timeline').getBoundingClientRect();\
        document.body.setAttribute('data-box',[r.left,r.top,r.width,r.height].join(' '));</script>";
    std::fs::write(&probe, html.replace("</body>", &format!("{script}</body>"))).expect("write");
    let dom = run_chromium(chrome, &dir.join("profile"), window, "--dump-dom", &probe);
    let start = dom.find("data-box=\"").expect("the probe script ran") + "data-box=\"".len();
    let rest = &dom[start..];
    let values: Vec<f64> = rest[..rest.find('"').expect("attribute end")]
        .split(' ')
        .map(|v| v.parse().expect("a number"))
        .collect();
    values.try_into().expect("four numbers")
}

/// A decoded screenshot: RGB pixels, row by row.
struct Shot {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

impl Shot {
    fn take(chrome: &Path, dir: &Path, page: &Path, window: (u32, u32)) -> Shot {
        let file = dir.join("shot.png");
        let mode = format!("--screenshot={}", file.display());
        run_chromium(chrome, &dir.join("profile"), window, &mode, page);
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(&file).expect("screenshot written"),
        ));
        let mut reader = decoder.read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("decode");
        let step = match info.color_type {
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            other => panic!("unexpected screenshot colour type {other:?}"),
        };
        let rgb = buf[..info.buffer_size()]
            .chunks_exact(step)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        Shot {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    fn at(&self, x: u32, y: u32) -> [u8; 3] {
        assert!(
            x < self.width && y < self.height,
            "({x}, {y}) outside the screenshot"
        );
        self.rgb[(y * self.width + x) as usize]
    }

    /// The pixels of rows `ys` and columns `xs`.
    fn region(
        &self,
        xs: std::ops::Range<u32>,
        ys: std::ops::Range<u32>,
    ) -> impl Iterator<Item = [u8; 3]> + '_ {
        ys.flat_map(move |y| xs.clone().map(move |x| self.at(x, y)))
    }

    /// The screenshot's top-left `width` × `height` pixels as an optimised PNG.
    fn write_cropped(&self, width: u32, height: u32, out: &Path) {
        let (w, h) = (width.min(self.width), height.min(self.height));
        let file = std::fs::File::create(out).expect("create the screenshot file");
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::High);
        let mut writer = enc.write_header().expect("PNG header");
        let data: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| self.at(x, y)))
            .collect();
        writer.write_image_data(&data).expect("PNG data");
    }
}

fn hex(c: &str) -> [u8; 3] {
    let v = u32::from_str_radix(c.trim_start_matches('#'), 16).expect("#rrggbb");
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

const WHITE: [u8; 3] = [255, 255, 255];

#[test]
fn report_html_references_nothing_external() {
    let html = render(&example());
    for external in [
        "http://", "https://", "src=", "<link", "url(", "@import", "<script",
    ] {
        assert!(!html.contains(external), "report.html holds {external:?}");
    }
    // Strings from the evidence are escaped, not markup.
    assert!(html.contains("ready by carol &lt;change 42&gt;"));
}

#[test]
fn every_lane_is_drawn_in_headless_chromium() {
    let Some(chrome) = chromium() else { return };
    let drill = example();
    let svc = &drill.services[0];
    let html = render(&drill);
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("report.html");
    std::fs::write(&page, &html).expect("write report.html");

    let [left, top, width, height] = timeline_box(&chrome, dir.path(), &html, WINDOW);
    assert_eq!(
        width,
        f64::from(svg::WIDTH),
        "the timeline is drawn unscaled"
    );
    assert!(
        top + height < f64::from(WINDOW.1),
        "the timeline fits the window: {top} + {height}"
    );
    let (left, top) = (left.round() as u32, top.round() as u32);
    let shot = Shot::take(&chrome, dir.path(), &page, WINDOW);
    assert_eq!((shot.width, shot.height), WINDOW);

    // Ink: anything but the page, a lane's empty background, its outline and the grid.
    let blank = [WHITE, hex("#fafafa"), hex("#e0e0e0")];
    let colours = svg::class_colours(["server_read_only", "tcp_timeout"]);
    let lanes = svg::lanes(svc);
    assert_eq!(
        lanes.len(),
        2 + 1 + 2,
        "two branches, the stable name, two alarms"
    );
    let xs = left + svg::PLOT_LEFT + 2..left + svg::PLOT_RIGHT - 2;
    for lane in &lanes {
        let ys = top + lane.top + 2..top + lane.top + lane.height - 2;
        let total = xs.len() * ys.len();
        let ink = shot
            .region(xs.clone(), ys.clone())
            .filter(|p| !blank.contains(p))
            .count();
        // An empty lane shows only the two marker rules and the grid: well under 2 %.
        assert!(
            ink * 100 >= total * 25,
            "lane {} ({:?}) at rows {ys:?}: only {ink} of {total} pixels drawn",
            lane.data_lane,
            lane.kind
        );
        if lane.kind == LaneKind::Branch && lane.data_lane.contains("primary") {
            // Both failure classes show in their own colour on the failing branch.
            for (class, colour) in &colours {
                let want = hex(colour);
                assert!(
                    shot.region(xs.clone(), ys.clone()).any(|p| p == want),
                    "no {class} ({colour}) pixel in lane {}",
                    lane.data_lane
                );
            }
        }
    }
    // Outside the lanes: the label column between two lanes, and the page right of the picture.
    for pair in lanes.windows(2) {
        let ys = top + pair[0].top + pair[0].height + 2..top + pair[1].top - 1;
        let inked = shot
            .region(left + 4..left + svg::PLOT_LEFT - 60, ys.clone())
            .filter(|p| *p != WHITE)
            .count();
        assert_eq!(
            inked, 0,
            "ink between lanes {} at rows {ys:?}",
            pair[0].data_lane
        );
    }
    let right = left + svg::WIDTH + 4..WINDOW.0 - 1;
    let ys = top..top + height as u32;
    assert!(
        shot.region(right, ys).all(|p| p == WHITE),
        "ink right of the timeline"
    );

    if let Ok(out) = std::env::var("READYPROBE_WRITE_SCREENSHOT") {
        write_doc_screenshot(&chrome, &html, Path::new(&out));
    }
}

/// Write the first timeline's screenshot (with the page's heading) for the docs: the example's,
/// or that of `READYPROBE_SCREENSHOT_SOURCE` (a real drill's report.html).
fn write_doc_screenshot(chrome: &Path, example_html: &str, out: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let html = match std::env::var("READYPROBE_SCREENSHOT_SOURCE") {
        Ok(src) => std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("read {src}: {e}")),
        Err(_) => example_html.to_string(),
    };
    let page = dir.path().join("report.html");
    std::fs::write(&page, &html).expect("write report.html");
    let [left, top, width, height] = timeline_box(chrome, dir.path(), &html, WINDOW);
    let bottom = (top + height).ceil() as u32 + 12;
    let window = (WINDOW.0, bottom.max(WINDOW.1));
    let shot = Shot::take(chrome, dir.path(), &page, window);
    let right = (left + width).ceil() as u32 + left.round() as u32;
    shot.write_cropped(right, bottom, out);
    let size = std::fs::metadata(out).expect("written").len();
    eprintln!(
        "wrote {} ({right} x {bottom} px, {size} bytes)",
        out.display()
    );
}
