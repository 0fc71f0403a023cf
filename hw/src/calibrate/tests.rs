//! Tests of the calibration without a GPU: a fake runner that answers like a machine with a known eager window,
//! the profile it derives, the files' round trips, and the probe programs against the model.

use super::*;
use crate::observation::*;
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::{explore, Exploration, Limits};

const TOPO: &str = "\t\u{1b}[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m\n\
GPU0\t X \tNV18\t0-31\t0\t\tN/A\n\
GPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n";

/// A machine whose connection buffers hold `window` bytes in all (the total of consecutive sends counts), whose
/// launches on one communicator are serialized, that runs kernels of two streams at once, and whose non-mirrored
/// first contact fails.
struct Fake {
    window: u64,
    runs: Vec<String>,
    envs: Vec<Vec<(String, String)>>,
    first_contact: FirstContactMode,
}

/// What the fake's non-mirrored first contact does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FirstContactMode {
    /// Fails with an illegal memory access (seen on NCCL 2.28.3 on 2026-11-29, first device run).
    Fail,
    /// Hangs after every call returned (seen on 2.28.3 and 2.28.9 in the calibration run).
    DeviceHang,
    /// Hangs with both hosts inside the send (the wait `NonMirrored::Hang` models).
    HostHang,
}

impl Fake {
    fn new(window: u64) -> Fake {
        Fake { window, runs: vec![], envs: vec![], first_contact: FirstContactMode::Fail }
    }
}

fn obs(p: &Program, outcome: Outcome, host: &dyn Fn(u32, u32) -> (u64, u64)) -> Observation {
    let mut ops = Vec::new();
    for (r, rank) in p.ranks.iter().enumerate() {
        for i in 0..rank.threads[0].ops.len() {
            let (r, i) = (r as u32, i as u32);
            let (a, b) = host(r, i);
            ops.push(OpObservation {
                op: OpId { rank: r, thread: 0, index: i },
                kind: crate::lower::op_kind_name(&rank.threads[0].ops[i as usize].kind).to_string(),
                host_enter_ns: Some(a),
                host_return_ns: Some(b),
                // Every op spans 0.5 us, one every microsecond.
                device: Some(DeviceSpan { gpu: r, start_ns: Some(1000 * i as u64), end_ns: Some(1000 * i as u64 + 500) }),
                finished: Some(true),
                evidence: Evidence::DeviceTrace,
                query_ready: None,
                error: None,
            });
        }
    }
    let gpus = (0..p.ranks.len() as u32)
        .map(|r| GpuInfo { rank: r, ordinal: r, name: "NVIDIA H200".into(), pci_bus_id: None, compute_capability: (9, 0) })
        .collect();
    Observation {
        format_version: FORMAT_VERSION,
        program: p.name.clone(),
        outcome,
        environment: Environment { gpus, driver_version: Some(13000), nccl_version: Some(22803), ..Default::default() },
        timeout_ms: 3000,
        versions: Default::default(),
        reads: vec![],
        ops,
        clock_anchors: vec![],
    }
}

impl ProbeRunner for Fake {
    fn run(&mut self, p: &Program, _timeout: Duration, env: &[(&str, &str)]) -> Result<Observation, String> {
        self.runs.push(p.name.clone());
        self.envs.push(env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        crate::lower::lower(p).map_err(|e| format!("{e:?}"))?;
        let seq = |_: u32, i: u32| (1000 * i as u64, 1000 * i as u64 + 100);
        let name = p.name.as_str();
        let hung = Outcome::Hung { never_finished: vec![], threads: vec![] };
        Ok(if let Some(rest) = name.strip_prefix("eager-") {
            let (k, n) = rest.split_once('x').unwrap();
            let total = k.parse::<u64>().unwrap() * n.parse::<u64>().unwrap();
            obs(p, if total <= self.window { Outcome::Completed } else { hung }, &seq)
        } else if name.starts_with("n5-two-streams") {
            obs(p, hung, &seq)
        } else if name.starts_with("n7-first-contact-ungrouped") && self.first_contact != FirstContactMode::Fail {
            let mut o = obs(p, hung, &seq);
            for x in &mut o.ops {
                if self.first_contact == FirstContactMode::HostHang && x.op.index == 0 {
                    x.host_return_ns = None;
                }
                x.finished = Some(x.op.index == 0 && self.first_contact == FirstContactMode::DeviceHang);
            }
            o
        } else if name.starts_with("n7-first-contact-ungrouped") {
            let message = "rank 0: op (rank 0, thread 0, op 1): ncclRecv failed: unhandled cuda error (run with \
                           NCCL_DEBUG=INFO for details): ... an illegal memory access was encountered"
                .to_string();
            obs(p, Outcome::Failed { rank: Some(0), message }, &seq)
        } else if name.starts_with("n7-first-contact-grouped") {
            // The group end (op 3) takes 200 ms.
            obs(p, Outcome::Completed, &|_, i| if i == 3 { (3000, 200_003_000) } else { seq(0, i) })
        } else if name.starts_with("n7-late-peer") {
            // Rank 0's send (op 0) returns after the peer woke up.
            obs(p, Outcome::Completed, &|r, i| if (r, i) == (0, 0) { (0, 501_000_000) } else { seq(r, i) })
        } else {
            obs(p, Outcome::Completed, &seq)
        })
    }

    fn topology(&mut self) -> Option<String> {
        Some(TOPO.into())
    }

    fn driver(&mut self) -> Option<String> {
        Some("580.159.04".into())
    }
}

fn quiet() -> impl FnMut(&str) {
    |_: &str| {}
}

#[test]
fn fake_machine_gives_the_expected_profile() {
    let window = 8 * MIB + 300 * KIB;
    let mut fake = Fake::new(window);
    let mut lines = Vec::new();
    let opts = CalibrateOptions { launch_count: 40, event_reps: 4, ..Default::default() };
    let out = calibrate(&mut fake, &opts, &mut |l: &str| lines.push(l.to_string()), None);
    let p = &out.profile;
    assert_eq!(p.name, "h200x2-nvlink-nccl2.28.3");
    assert!(p.eager_bytes_per_connection <= window && p.eager_bytes_per_connection * 1015 / 1000 + 8 * KIB >= window, "{p:?}");
    assert!(p.serialize_per_comm && !p.independent_progress && p.independent_progress_observed && p.lazy_connect, "{p:?}");
    assert_eq!(p.eager_bytes_guaranteed, None); // the total counts: the whole window is guaranteed
    assert_eq!(p.nonmirrored_first_contact, NonMirrored::Undefined);
    assert!(p.description.contains("2 x NVIDIA H200 (nvlink NV18), driver 580.159.04, NCCL 2.28.3"), "{}", p.description);
    assert!(p.description.contains("illegal memory access"), "{}", p.description);
    assert!(p.description.contains("the total of consecutive sends counts"), "{}", p.description);
    assert!(p.description.contains("observed, not guaranteed"), "{}", p.description);

    let m = &out.measurements;
    assert_eq!(m.eager.len(), 3);
    for e in &m.eager {
        let total = e.largest_fit_total.unwrap();
        assert!(total <= window && window - total <= window / 50 + 3 * 4 * KIB, "{} sends: {total}", e.sends);
        assert!(e.monotone && e.stopped.is_none() && e.confirm.len() == 2);
    }
    // The searches for 2 and 3 sends start near the boundary: few probes.
    assert!(m.eager[1].probes.len() <= 10, "{}", m.eager[1].probes.len());
    assert_eq!(m.large_bytes, 256 * MIB);
    assert_eq!(m.n5_two_streams, Some(ProbeOutcome::Hung));
    assert_eq!(m.n5_grouped, Some(ProbeOutcome::Completed));
    assert_eq!(m.first_contact.grouped_connect_host_ns, Some(200_000_000));
    assert_eq!(m.first_contact.late_peer_send_host_ns, Some(501_000_000));
    assert!(m.notes.iter().any(|n| n.contains("blocked the host until the peer came")), "{:?}", m.notes);
    assert_eq!(m.timing.p2p.len(), 10);
    // (after.start - before.end) / 2 with one op per microsecond, 0.5 us each, 3 ops apart.
    assert_eq!(m.timing.p2p[0].one_way_ns_median, Some(1250));
    assert!(m.timing.kernel.as_ref().unwrap().host_launch_ns_median == Some(100));
    assert!(m.timing.events.as_ref().unwrap().record_host_ns_median == Some(100));
    assert_eq!(m.link, Link { kind: "nvlink".into(), detail: Some("NV18".into()), source: "nvidia-smi topo -m".into() });
    assert_eq!(m.probes.len(), fake.runs.len());
    assert!(m.probes.iter().enumerate().all(|(i, p)| p.index == i as u32 + 1));
    // NCCL_DEBUG=INFO only for the P2P timing and first-contact probes; no markers for the event probe.
    for (name, env) in fake.runs.iter().zip(&fake.envs) {
        let info = env.iter().any(|(k, v)| k == "NCCL_DEBUG" && v == "INFO");
        assert_eq!(info, name == "timing-p2p" || name.starts_with("n7-"), "{name}: {env:?}");
        assert_eq!(env.iter().any(|(k, _)| k == "CUORDER_HW_NO_MARKERS"), name.starts_with("timing-") && name != "timing-launch");
    }
    // Progress lines: one per probe at least.
    assert!(lines.len() > m.probes.len(), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("#001 timing-p2p: Completed")), "{lines:?}");

    // The files: the profile loads as a Profile, the measurements round-trip.
    let text = profile_ron(p, "traces/hw/calibration/x.measurements.ron");
    assert!(text.starts_with("// "));
    assert_eq!(&Profile::from_ron(&text).unwrap(), p);
    let back = Measurements::from_ron(&m.to_ron()).unwrap();
    assert_eq!(&back, m);
    assert_eq!(back.derived.as_ref(), Some(p));
}

#[test]
fn per_message_window_and_nothing_fits() {
    // Each send gets its own window: 2 and 3 sends of the one-send size all fit.
    struct PerMsg(Fake);
    impl ProbeRunner for PerMsg {
        fn run(&mut self, p: &Program, t: Duration, env: &[(&str, &str)]) -> Result<Observation, String> {
            if let Some(rest) = p.name.strip_prefix("eager-") {
                let n: u64 = rest.split_once('x').unwrap().1.parse().unwrap();
                let oc = if n <= self.0.window { Outcome::Completed } else { Outcome::Hung { never_finished: vec![], threads: vec![] } };
                return Ok(obs(p, oc, &|_, i| (i as u64, i as u64)));
            }
            self.0.run(p, t, env)
        }
    }
    let mut r = PerMsg(Fake::new(MIB));
    let opts = CalibrateOptions { skip: vec![Stage::Timing, Stage::N5, Stage::S1, Stage::FirstContact], ..Default::default() };
    let out = calibrate(&mut r, &opts, &mut quiet(), None);
    let f = out.measurements.eager[2].largest_fit_per_send.unwrap();
    assert!((MIB - 16 * KIB..=MIB).contains(&f), "{f}");
    assert_eq!(out.profile.eager_bytes_per_connection, 3 * f);
    assert_eq!(out.profile.eager_bytes_guaranteed, Some(out.measurements.eager[0].largest_fit_total.unwrap()));
    assert!(out.profile.description.contains("2 sends each get it, 3 sends each get it"), "{}", out.profile.description);
    // Not measured: the portable values, and the link from nothing.
    assert!(out.profile.serialize_per_comm && !out.profile.independent_progress && out.profile.lazy_connect);
    assert_eq!(out.measurements.link.kind, "unknown"); // no topology, no bandwidth

    let mut r = Fake::new(0);
    let opts = CalibrateOptions { eager_sends: vec![1], skip: vec![Stage::Timing], ..Default::default() };
    let out = calibrate(&mut r, &opts, &mut quiet(), None);
    assert_eq!(out.profile.eager_bytes_per_connection, 0);
    assert!(out.measurements.notes.iter().any(|n| n.contains("rendezvous")), "{:?}", out.measurements.notes);
}

#[test]
fn spent_budget_skips_everything_and_keeps_portable_values() {
    let mut r = Fake::new(MIB);
    let opts = CalibrateOptions { budget: Duration::ZERO, name: Some("x".into()), ..Default::default() };
    let dir = std::env::temp_dir().join(format!("cuorder-cal-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let partial = dir.join("partial.ron");
    let out = calibrate(&mut r, &opts, &mut quiet(), Some(partial.clone()));
    assert!(r.runs.is_empty());
    assert!(out.measurements.probes.iter().all(|p| matches!(p.outcome, ProbeOutcome::Skipped(_))));
    let mut want = Profile::portable();
    want.name = "x".into();
    want.description = out.profile.description.clone();
    assert_eq!(out.profile, want);
    assert_eq!(Measurements::from_ron(&std::fs::read_to_string(&partial).unwrap()).unwrap(), out.measurements);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_machine_stops_the_calibration() {
    struct Broken(u32);
    impl ProbeRunner for Broken {
        fn run(&mut self, _: &Program, _: Duration, _: &[(&str, &str)]) -> Result<Observation, String> {
            self.0 += 1;
            Err("set-up did not finish".into())
        }
    }
    let mut r = Broken(0);
    let out = calibrate(&mut r, &CalibrateOptions::default(), &mut quiet(), None);
    assert_eq!(r.0, MAX_FAILURES_IN_ROW);
    assert!(out.measurements.probes.len() > 10);
    assert!(matches!(&out.measurements.probes.last().unwrap().outcome, ProbeOutcome::Skipped(m) if m.contains("unusable")));
    // Nothing measured: every value is the portable one.
    assert_eq!(out.profile.eager_bytes_per_connection, Profile::portable().eager_bytes_per_connection);
    assert!(out.profile.serialize_per_comm && !out.profile.independent_progress && out.profile.lazy_connect);
}

#[test]
fn first_contact_hang_on_the_device_is_undefined_on_the_host_is_hang() {
    let opts = CalibrateOptions { skip: vec![Stage::Timing, Stage::Eager, Stage::N5, Stage::S1], ..Default::default() };
    let mut f = Fake::new(MIB);
    f.first_contact = FirstContactMode::DeviceHang;
    let out = calibrate(&mut f, &opts, &mut quiet(), None);
    let fc = &out.measurements.first_contact;
    assert_eq!((fc.ungrouped_calls_returned, fc.ungrouped_sends_finished), (Some(true), Some(true)));
    assert!(out.profile.lazy_connect && out.profile.nonmirrored_first_contact == NonMirrored::Undefined);
    assert!(out.profile.description.contains("hung on the device after the calls returned, both sends finished -> undefined"), "{}", out.profile.description);
    assert!(out.profile.description.contains("N7 set-up blocks the host (first send to a late peer: 501 ms"), "{}", out.profile.description);

    let mut f = Fake::new(MIB);
    f.first_contact = FirstContactMode::HostHang;
    let out = calibrate(&mut f, &opts, &mut quiet(), None);
    assert_eq!(out.measurements.first_contact.ungrouped_calls_returned, Some(false));
    assert!(out.profile.lazy_connect && out.profile.nonmirrored_first_contact == NonMirrored::Hang);
}

#[test]
fn rederive_reads_the_probe_observations() {
    // A calibration whose measurements predate the hang-shape fields: re-derived from its probe folder.
    let opts = CalibrateOptions { skip: vec![Stage::Timing, Stage::Eager, Stage::N5, Stage::S1], ..Default::default() };
    let mut f = Fake::new(MIB);
    f.first_contact = FirstContactMode::DeviceHang;
    let out = calibrate(&mut f, &opts, &mut quiet(), None);
    let mut m = out.measurements.clone();
    m.first_contact.ungrouped_calls_returned = None;
    m.first_contact.ungrouped_sends_finished = None;
    let old = derive_profile(&m).0;
    assert_eq!(old.nonmirrored_first_contact, NonMirrored::Hang);
    // Older measurement files lack the new fields: they still load.
    let text = m.to_ron().replace("ungrouped_calls_returned: None,", "").replace("ungrouped_sends_finished: None,", "");
    let mut m = Measurements::from_ron(&text).unwrap();

    let dir = std::env::temp_dir().join(format!("cuorder-rederive-test-{}", std::process::id()));
    let rec = m.probes.iter().find(|p| p.program.starts_with("n7-first-contact-ungrouped")).unwrap().clone();
    let pd = dir.join(format!("{:03}-{}", rec.index, rec.program));
    std::fs::create_dir_all(&pd).unwrap();
    let mut f2 = Fake::new(MIB);
    f2.first_contact = FirstContactMode::DeviceHang;
    let o = f2.run(&probes::first_contact(KIB, false), Duration::from_secs(3), &[]).unwrap();
    std::fs::write(pd.join("observation.ron"), o.to_ron()).unwrap();
    let p = rederive(&mut m, &dir).unwrap();
    assert_eq!(p.nonmirrored_first_contact, NonMirrored::Undefined);
    assert_eq!(p.name, out.profile.name);
    assert_eq!(m.derived.as_ref(), Some(&p));
    assert!(m.notes.last().unwrap().contains("re-derived"));
    assert!(rederive(&mut m, &dir.join("nothing")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eager_granules_explain_per_send_rounding() {
    // The boundaries measured on 2 x H200, NCCL 2.28.3 (window 64 MiB; 2 x 32 MiB fit; 3 x 16 MiB fit but
    // 3 x 16.16 MiB hung): each send rounded up to 8 or 16 MiB explains them all.
    let mut m = calibrate(&mut Fake::new(MIB), &CalibrateOptions { skip: Stage::ALL.to_vec(), ..Default::default() }, &mut quiet(), None).measurements;
    let search = |k: u32, f: u64, h: u64| EagerSearch {
        sends: k,
        params: SearchParams { start: 0, max: GIB, granule: 4 * KIB, rel_tol_ppm: 15_000 },
        probes: vec![],
        largest_fit_per_send: Some(f),
        smallest_hang_per_send: Some(h),
        largest_fit_total: Some(k as u64 * f),
        stopped: None,
        monotone: true,
        confirm: vec![],
    };
    m.eager = vec![search(1, 64 * MIB, 67633152), search(2, 32 * MIB, 33816576), search(3, 16 * MIB, 16949248)];
    assert_eq!(eager_granules(&m), vec![8 * MIB, 16 * MIB]);
    assert_eq!(derive_profile(&m).0.eager_bytes_guaranteed, Some(48 * MIB));
    assert_eq!(derive_profile(&m).0.eager_guaranteed(), 48 * MIB);
    assert!(derive_profile(&m).1.iter().any(|n| n.contains("granules of 8 MiB or 16 MiB")));
    // Byte-exact sharing explains these: no granule note.
    m.eager = vec![search(1, 64 * MIB, 65 * MIB), search(2, 32 * MIB, 33 * MIB)];
    assert!(eager_granules(&m).is_empty());
}

#[test]
fn committed_calibration_files_load() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in ["traces/profiles", "traces/hw/calibration"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir)) else { continue };
        for e in rd.flatten() {
            let path = e.path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if name.ends_with(".measurements.ron") {
                let m = Measurements::from_ron(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                let p = m.derived.expect("a derived profile");
                // The profile file of the same name says the same.
                let prof = std::fs::read_to_string(root.join("traces/profiles").join(format!("{}.ron", m.profile))).unwrap();
                assert_eq!(Profile::from_ron(&prof).unwrap(), p, "{name}");
            } else if dir == "traces/profiles" && name.ends_with(".ron") {
                Profile::from_ron(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}

#[test]
fn names_and_topology() {
    assert_eq!(parse_topology(TOPO), Some(("nvlink".into(), "NV18".into())));
    assert_eq!(parse_topology("GPU0\t X \tPIX\t0-1\nGPU1\tPIX\t X\n"), Some(("pcie".into(), "PIX".into())));
    assert_eq!(parse_topology("nothing"), None);
    assert_eq!(nccl_version_string(22803), "2.28.3");
    assert_eq!(nccl_version_string(2708), "2.7.8");
    assert_eq!(gpu_model("NVIDIA H200"), "h200");
    assert_eq!(gpu_model("NVIDIA GeForce RTX 4090"), "rtx4090");
    assert_eq!(gpu_model("NVIDIA A100-SXM4-80GB"), "a100sxm480gb");
    assert_eq!(profile_name(&["NVIDIA H200".into(), "NVIDIA H200".into()], "nvlink", Some(22803)), "h200x2-nvlink-nccl2.28.3");
    assert_eq!(profile_name(&[], "unknown", None), "gpux1-unknown-ncclunknown");
    assert_eq!(civil_date(0), "1970-01-01");
    assert_eq!(civil_date(20_000), "2024-10-04");
    assert_eq!(Stage::parse("First-Contact"), Some(Stage::FirstContact));
}

fn check(p: &Program, prof: &Profile) -> Exploration {
    let sem = Semantics::new(p, prof);
    explore(&sem, &Limits { max_states: 200_000, ..Limits::default() })
}

fn kinds(e: &Exploration) -> Vec<&'static str> {
    let mut k: Vec<&'static str> = e.findings.iter().map(|f| f.problem.kind_name()).collect();
    k.sort_unstable();
    k.dedup();
    k
}

/// Every probe lowers for the executor, and the model predicts what the probe is meant to tell apart.
#[test]
fn probes_are_valid_programs_that_the_model_tells_apart() {
    let mut eager = Profile::portable();
    eager.eager_bytes_per_connection = 2 * MIB;
    eager.independent_progress = true;
    let mut lazy_undef = Profile::eager();
    lazy_undef.nonmirrored_first_contact = NonMirrored::Undefined;
    let mut free = Profile::portable();
    free.serialize_per_comm = false;
    free.independent_progress = true;

    // N2: rendezvous never completes; portable (eager possible, none guaranteed) may complete and may deadlock;
    // with a window of 2 MiB, 2 x 1 MiB may complete, 3 x 1 MiB cannot.
    let mut rendezvous = Profile::portable();
    rendezvous.eager_bytes_per_connection = 0;
    let e = check(&probes::eager(MIB, 2), &rendezvous);
    assert!(e.limit_hit.is_none() && e.completed_states == 0 && kinds(&e) == ["deadlock"], "{e:?}");
    let e = check(&probes::eager(MIB, 2), &Profile::portable());
    assert!(e.limit_hit.is_none() && e.completed_states > 0 && kinds(&e) == ["deadlock"], "{e:?}");
    let e = check(&probes::eager(MIB, 2), &eager);
    assert!(e.completed_states > 0, "{e:?}");
    assert!(kinds(&e).iter().all(|k| *k == "deadlock"), "{e:?}");
    assert_eq!(check(&probes::eager(MIB, 3), &eager).completed_states, 0);

    // N5: serialized launches on one communicator hang; without serialization (and with overlap) it completes;
    // the grouped control completes.
    let big = 256 * MIB;
    let e = check(&probes::same_comm_two_streams(big, false), &rendezvous);
    assert!(e.completed_states == 0 && kinds(&e) == ["deadlock"], "{e:?}");
    let e = check(&probes::same_comm_two_streams(big, false), &Profile::portable());
    assert!(kinds(&e) == ["deadlock"], "{e:?}");
    let e = check(&probes::same_comm_two_streams(big, false), &free);
    assert!(e.completed_states > 0, "{e:?}");
    let e = check(&probes::same_comm_two_streams(big, true), &Profile::eager());
    assert!(e.clean() && e.completed_states > 0, "{e:?}");

    // S1: with independent progress the crossed sends complete; without, the device may starve one: deadlock.
    let e = check(&probes::two_comms_crossed(big), &Profile::eager());
    assert!(e.completed_states > 0 && !kinds(&e).contains(&"undefined") && !kinds(&e).contains(&"data race"), "{e:?}");
    let e = check(&probes::two_comms_crossed(big), &Profile::portable());
    assert!(kinds(&e).contains(&"deadlock"), "{e:?}");

    // N7: non-mirrored first contact: undefined, or a hang; grouped first contact and the late peer complete.
    let e = check(&probes::first_contact(KIB, false), &lazy_undef);
    assert!(kinds(&e).contains(&"undefined"), "{e:?}");
    let e = check(&probes::first_contact(KIB, false), &Profile::eager());
    assert!(e.completed_states == 0 && kinds(&e) == ["deadlock"], "{e:?}");
    for p in [probes::first_contact(KIB, true), probes::first_contact_late_peer(KIB, 500_000_000)] {
        let e = check(&p, &lazy_undef);
        assert!(e.clean() && e.completed_states > 0, "{}: {e:?}", p.name);
    }

    // The timing probes (small instances) are race-free and complete (under rendezvous: an eager window makes the
    // ping-pong's interleavings explode).
    let (p, _) = probes::p2p_timing(&[4 * KIB, 64 * KIB], 2);
    let e = check(&p, &rendezvous);
    assert!(e.clean() && e.completed_states > 0, "{e:?}");
    for p in [probes::launch_timing(4, 1000).0, probes::event_timing(2, 1000).0] {
        let e = check(&p, &Profile::portable());
        assert!(e.clean() && e.completed_states > 0, "{}: {e:?}", p.name);
    }

    // And every probe at the sizes the calibration uses lowers.
    let mut all = probes::semantic_programs(big);
    all.push(probes::p2p_timing(&CalibrateOptions::default().timing_sizes, 5).0);
    all.push(probes::launch_timing(1000, 20_000_000).0);
    all.push(probes::event_timing(50, 100_000).0);
    for p in &all {
        crate::lower::lower(p).unwrap_or_else(|e| panic!("{}: {e:?}", p.name));
        let back: Program = ron::from_str(&crate::smoke::to_ron(p)).unwrap();
        assert_eq!(&back, p);
    }
}
