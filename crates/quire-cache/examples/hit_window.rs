//! A measuring aid for the hit path's length, not a benchmark of quire: what each instruction
//! added to a hit
//! costs when hits touch random pages of a buffer larger than the last-level cache.
//!
//! A loop like `kernel-mmap-ref`'s (64 bytes of a random page per iteration, the next index
//! independent of the bytes) is bound by how many of its cache misses the processor overlaps,
//! and that is how many iterations fit in its out-of-order window: the load queue, the store
//! queue and the reorder buffer, all held by instructions that cannot retire before the miss
//! ahead of them. So an instruction on the hit path costs time in proportion to the resources
//! it holds in that window, not to its own latency. This example measures that with the same
//! loop padded by `N` extra instructions of one kind (inline assembly, so the compiler can
//! neither drop nor merge them):
//!
//! - `nops`: `nop`s (reorder-buffer entries only);
//! - `loads`: loads of one line that stays in L1;
//! - `stores`: stores to one line that stays in L1;
//! - `store+fence`: one store and a `lock or` fence (what `Borrow::begin` adds), then `N` nops.
//!
//! and, for scale, the latency of one dependent miss (`chase`: each page holds the index of the
//! next, in a random cycle).
//!
//! `cargo run --release -p quire-cache --example hit_window -- [MiB] [seconds]` (256 MiB and 1 s a
//! line by default). x86_64 only (the padding is assembly); elsewhere it prints why it skipped.

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::hint::black_box;
    use std::time::Instant;

    const PAGE: usize = 4096;
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(256, |a| a.parse().expect("MiB"));
    let secs: f64 = args.next().map_or(1.0, |a| a.parse().expect("seconds"));
    let mut data = vec![7u8; mib << 20];
    let pages = (data.len() / PAGE) as u64;

    // One loop per (kind, N): the padding is a literal in the assembly.
    macro_rules! touch_loop {
        ($label:expr, $n:literal, |$idx:ident, $line:ident| $pad:block) => {{
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            #[allow(unused_mut)]
            let mut $line = [0u64; 8];
            let t0 = Instant::now();
            let mut n = 0u64;
            while t0.elapsed().as_secs_f64() < secs {
                for _ in 0..1024 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let $idx = x % pages;
                    $pad
                    let at = $idx as usize * PAGE;
                    let mut head = [0u8; 64];
                    head.copy_from_slice(&data[at..at + 64]);
                    black_box(&head);
                }
                n += 1024;
            }
            black_box(&$line);
            let ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
            println!("{:12} {:>3}: {ns:6.1} ns per touch", $label, $n);
        }};
    }
    macro_rules! nops {
        ($n:literal) => {
            touch_loop!("nops", $n, |idx, line| {
                let _ = (idx, &mut line);
                // SAFETY: nops only.
                unsafe {
                    std::arch::asm!(
                        concat!(".rept ", $n, "\nnop\n.endr"),
                        options(nomem, nostack)
                    )
                };
            })
        };
    }
    macro_rules! loads {
        ($n:literal) => {
            touch_loop!("loads", $n, |idx, line| {
                let _ = idx;
                // SAFETY: reads the first word of `line`, a live local array, `N` times.
                unsafe {
                    std::arch::asm!(
                        concat!(".rept ", $n, "\nmov {t}, qword ptr [{p}]\n.endr"),
                        p = in(reg) line.as_ptr(),
                        t = out(reg) _,
                        options(readonly, nostack),
                    )
                };
            })
        };
    }
    macro_rules! stores {
        ($n:literal) => {
            touch_loop!("stores", $n, |idx, line| {
                // SAFETY: writes the first word of `line`, a live local array, `N` times.
                unsafe {
                    std::arch::asm!(
                        concat!(".rept ", $n, "\nmov qword ptr [{p}], {v}\n.endr"),
                        p = in(reg) line.as_mut_ptr(),
                        v = in(reg) idx,
                        options(nostack),
                    )
                };
            })
        };
    }
    macro_rules! store_fence {
        ($n:literal) => {
            touch_loop!("store+fence", $n, |idx, line| {
                // SAFETY: writes the first word of `line`, a live local array, then fences
                // (a locked `or` of zero into the stack slot below the stack pointer, as
                // `std::sync::atomic::fence(SeqCst)` compiles), then nops.
                unsafe {
                    std::arch::asm!(
                        concat!(
                            "mov qword ptr [{p}], {v}\nlock or dword ptr [rsp - 64], 0\n",
                            ".rept ",
                            $n,
                            "\nnop\n.endr"
                        ),
                        p = in(reg) line.as_mut_ptr(),
                        v = in(reg) idx,
                    )
                };
            })
        };
    }

    println!("{mib} MiB buffer, 64 bytes of a random page per touch");
    nops!("0");
    nops!("20");
    nops!("40");
    loads!("10");
    loads!("20");
    loads!("40");
    stores!("5");
    stores!("10");
    stores!("20");
    store_fence!("0");
    store_fence!("20");

    // The dependent-miss latency: each page's first word names the next page of one random
    // cycle through all of them.
    let mut order: Vec<u64> = (0..pages).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for (i, &p) in order.iter().enumerate() {
        let next = order[(i + 1) % order.len()];
        let at = p as usize * PAGE;
        data[at..at + 8].copy_from_slice(&next.to_le_bytes());
    }
    let mut p = order[0] as usize;
    let steps = 2_000_000u64;
    let t0 = Instant::now();
    for _ in 0..steps {
        let at = p * PAGE;
        p = u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes")) as usize;
    }
    black_box(p);
    println!(
        "chase          : {:6.1} ns per dependent miss",
        t0.elapsed().as_secs_f64() * 1e9 / steps as f64
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("skipped: hit_window pads its loop with x86_64 assembly");
}
