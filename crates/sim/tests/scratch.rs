use oxrdma_sim::{run, NetConfig, ScenarioConfig};
#[test]
fn scratch() {
    let seeds: Vec<u64> = match std::env::var("S") { Ok(s) => vec![s.parse().unwrap()], _ => (0..300).collect() };
    for (pairs, wrs, maxlen) in [(1, 12, 20000)] {
        for &seed in &seeds {
            let cfg = ScenarioConfig { qp_pairs: pairs, wrs_per_qp: wrs, max_len: maxlen, net: NetConfig { loss: 0.05, ..Default::default() }, ..ScenarioConfig::new(seed) };
            let r = run(&cfg);
            if !r.violations.is_empty() { println!("{pairs} {wrs} {maxlen} seed {seed}: {:?}", r.violations); return; }
        }
    }
}
