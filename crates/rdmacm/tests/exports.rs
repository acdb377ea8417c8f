//! The library this package builds names every librdmacm function of `symbols.txt` in its
//! dynamic symbol table (programs and the API's rdma-core backend find them by name).

#[test]
fn every_librdmacm_function_is_exported_by_name() {
    let exe = std::env::current_exe().unwrap();
    let so = exe.with_file_name("liboxrdma_rdmacm.so");
    let bytes = std::fs::read(&so).unwrap_or_else(|e| panic!("{}: {e}", so.display()));
    let list = include_str!("../symbols.txt");
    let names: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names.len(), 68, "rdma-core 44's librdmacm has 68 functions");
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| {
            let want = [n.as_bytes(), b"\0"].concat();
            !bytes.windows(want.len()).any(|w| w == want.as_slice())
        })
        .collect();
    assert!(missing.is_empty(), "not in {}: {missing:?}", so.display());
}
