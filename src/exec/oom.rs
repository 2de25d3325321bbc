//! GPU out-of-memory detection in a job's logs.
//!
//! A GPU OOM is worth telling apart from other failures: the scheduler
//! learns from it (raise the memory estimate, stop collocating) instead of
//! just counting a failure. The signal is text, so matching is deliberately
//! conservative; every signature names a GPU allocator or a CUDA status:
//!
//! | signature | source |
//! |---|---|
//! | `torch.OutOfMemoryError` (also `torch.cuda.OutOfMemoryError`) | PyTorch exception type |
//! | `CUDA out of memory` | PyTorch caching allocator message |
//! | `CUDA error: out of memory` | PyTorch wrapping `cudaErrorMemoryAllocation` |
//! | `RESOURCE_EXHAUSTED` on a line that also says `OOM`, `out of memory` or `allocat…` | TensorFlow / XLA / JAX (`XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory …`) |
//! | `OOM when allocating tensor` | TensorFlow `ResourceExhaustedError` |
//! | `Out of memory while trying to allocate` | XLA's BFC allocator (JAX, TF) |
//! | `CUDA_ERROR_OUT_OF_MEMORY` | CUDA driver API |
//! | `cudaErrorMemoryAllocation` | CUDA runtime API |
//! | `CUBLAS_STATUS_ALLOC_FAILED` | cuBLAS |
//!
//! Not GPU OOMs, on purpose: a bare `Out of memory` (the kernel OOM killer
//! says `Out of memory: Killed process …`), Python's CPU `MemoryError`,
//! `std::bad_alloc`, PyTorch's `DefaultCPUAllocator: can't allocate memory`,
//! and `RESOURCE_EXHAUSTED` about anything but memory (gRPC message size,
//! quotas). Host memory exhaustion is a different remedy (host RAM, not GPU
//! placement). Evidence is only meaningful for an attempt that failed: the
//! tick should ignore it when the job exited 0. A match is the job's word, not a fact: the
//! tick weighs it against its own GPU readings before any recovery (`sched::judge_oom`).

use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ExecError;
use super::atomic::io_error;

/// Most bytes of a log's end any scan reads, whatever the caller asks: the log is the job's
/// file, its length the job's to choose, and no buffer is sized from it.
pub const SCAN_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Longest line kept as evidence, in bytes; longer lines are cut.
pub const EVIDENCE_LINE_BYTES_MAX: usize = 512;

/// Where in the logs a GPU OOM was seen.
///
/// JSON: `{"signature": "CUDA out of memory", "line": "torch.OutOfMemoryError: …"}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OomEvidence {
    /// The signature that matched (first column of the table above).
    pub signature: String,
    /// The matching line, trimmed and cut to [`EVIDENCE_LINE_BYTES_MAX`].
    pub line: String,
}

/// One OOM signature: a name and a line predicate.
struct Signature {
    name: &'static str,
    matches: fn(&str) -> bool,
}

/// Checked in order for each line; the first match names the line.
const SIGNATURES: &[Signature] = &[
    Signature {
        name: "torch.OutOfMemoryError",
        matches: |line| {
            line.contains("torch.OutOfMemoryError") || line.contains("torch.cuda.OutOfMemoryError")
        },
    },
    Signature { name: "CUDA out of memory", matches: |line| line.contains("CUDA out of memory") },
    Signature {
        name: "CUDA error: out of memory",
        matches: |line| line.contains("CUDA error: out of memory"),
    },
    Signature { name: "RESOURCE_EXHAUSTED", matches: resource_exhausted_memory },
    Signature {
        name: "OOM when allocating tensor",
        matches: |line| line.contains("OOM when allocating tensor"),
    },
    Signature {
        name: "Out of memory while trying to allocate",
        matches: |line| line.contains("Out of memory while trying to allocate"),
    },
    Signature { name: "CUDA_ERROR_OUT_OF_MEMORY", matches: |line| line.contains("CUDA_ERROR_OUT_OF_MEMORY") },
    Signature {
        name: "cudaErrorMemoryAllocation",
        matches: |line| line.contains("cudaErrorMemoryAllocation"),
    },
    Signature {
        name: "CUBLAS_STATUS_ALLOC_FAILED",
        matches: |line| line.contains("CUBLAS_STATUS_ALLOC_FAILED"),
    },
];

/// The last line of `text` carrying a GPU OOM signature (the last one is
/// closest to the failure, e.g. the final line of a traceback).
pub fn scan_oom(text: &str) -> Option<OomEvidence> {
    text.lines().rev().find_map(|line| {
        let signature = SIGNATURES.iter().find(|signature| (signature.matches)(line))?;
        Some(OomEvidence { signature: signature.name.to_string(), line: evidence_line(line) })
    })
}

/// [`scan_oom`] over the last `max_tail_bytes` of the file at `path`. A
/// missing file has no evidence; invalid UTF-8 is replaced, not an error.
pub fn scan_oom_file(path: &Path, max_tail_bytes: u64) -> Result<Option<OomEvidence>, ExecError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(source) if source.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error("open", path, source)),
    };
    scan_oom_open_file(&file, max_tail_bytes).map_err(|source| io_error("read", path, source))
}

/// [`scan_oom`] over the last `max_tail_bytes` of an open file, read with
/// `pread` so the descriptor's offset (which the job may share) is left
/// alone, and without opening any path again.
pub fn scan_oom_open_file(file: &File, max_tail_bytes: u64) -> std::io::Result<Option<OomEvidence>> {
    scan_oom_open_file_from(file, 0, max_tail_bytes)
}

/// As [`scan_oom_open_file`], reading nothing before byte `from` (where the current
/// attempt's output starts in a file that earlier attempts wrote too). At most
/// [`SCAN_BYTES_MAX`] bytes are read, the file's last.
pub fn scan_oom_open_file_from(
    file: &File,
    from: u64,
    max_tail_bytes: u64,
) -> std::io::Result<Option<OomEvidence>> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let max_tail_bytes = max_tail_bytes.min(SCAN_BYTES_MAX);
    let mut offset = len.saturating_sub(max_tail_bytes).max(from.min(len));
    let mut bytes = vec![0u8; usize::try_from(len - offset).unwrap_or(0)];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], offset) {
            Ok(0) => break, // the file shrank meanwhile
            Ok(read) => {
                filled += read;
                offset += read as u64;
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    bytes.truncate(filled);
    Ok(scan_oom(&String::from_utf8_lossy(&bytes)))
}

/// `RESOURCE_EXHAUSTED` is also gRPC's status for quotas and message sizes:
/// only count it when the same line talks about memory allocation.
fn resource_exhausted_memory(line: &str) -> bool {
    if !line.contains("RESOURCE_EXHAUSTED") {
        return false;
    }
    let lower = line.to_ascii_lowercase();
    line.contains("OOM") || lower.contains("out of memory") || lower.contains("allocat")
}

/// Trim and cut a line to at most [`EVIDENCE_LINE_BYTES_MAX`] bytes on a
/// character boundary.
fn evidence_line(line: &str) -> String {
    let line = line.trim();
    let mut end = line.len().min(EVIDENCE_LINE_BYTES_MAX);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

#[cfg(test)]
mod tests {
    //! Goal: every documented signature is found in a realistic log, the
    //! documented non-GPU failures are not, and file tails are honoured.
    //! Method: a table of (log text, expected signature or None).
    use super::*;

    const TORCH_TRACEBACK: &str = r#"Epoch 3:  41%|████      | 410/1000 [02:13<03:11,  3.08it/s]
Traceback (most recent call last):
  File "/home/alice/exp/train.py", line 88, in <module>
    loss.backward()
  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 581, in backward
    torch.autograd.backward(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.03 GiB is free. Including non-PyTorch memory, this process has 78.15 GiB memory in use. Of the allocated memory 75.80 GiB is allocated by PyTorch, and 1.84 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
"#;

    const JAX_TRACEBACK: &str = r#"2024-11-02 10:14:55.123456: W external/xla/xla/tsl/framework/bfc_allocator.cc:497] Allocator (GPU_0_bfc) ran out of memory trying to allocate 16.00GiB (rounded to 17179869184)requested by op
Traceback (most recent call last):
  File "train_jax.py", line 40, in <module>
    state, loss = train_step(state, batch)
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.
"#;

    const TF_LOG: &str = r#"2024-11-02 10:20:01.000001: W tensorflow/core/framework/op_kernel.cc:1828] OP_REQUIRES failed at conv_ops.cc:1068 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[256,512,28,28] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc
"#;

    const CASES: &[(&str, &str, Option<&str>)] = &[
        ("pytorch traceback", TORCH_TRACEBACK, Some("torch.OutOfMemoryError")),
        (
            "old pytorch",
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
            Some("CUDA out of memory"),
        ),
        (
            "torch.cuda alias",
            "torch.cuda.OutOfMemoryError: CUDA out of memory.",
            Some("torch.OutOfMemoryError"),
        ),
        (
            "cuda runtime via torch",
            "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
            Some("CUDA error: out of memory"),
        ),
        ("jax", JAX_TRACEBACK, Some("RESOURCE_EXHAUSTED")),
        ("tensorflow", TF_LOG, Some("RESOURCE_EXHAUSTED")),
        (
            "tf python error",
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192]",
            Some("OOM when allocating tensor"),
        ),
        (
            "xla allocator",
            "E0102 bfc_allocator.cc:12] Out of memory while trying to allocate 1024 bytes",
            Some("Out of memory while trying to allocate"),
        ),
        (
            "driver api",
            "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            Some("CUDA_ERROR_OUT_OF_MEMORY"),
        ),
        (
            "runtime api",
            "cudaMalloc returned cudaErrorMemoryAllocation (2)",
            Some("cudaErrorMemoryAllocation"),
        ),
        (
            "cublas",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            Some("CUBLAS_STATUS_ALLOC_FAILED"),
        ),
        (
            "python MemoryError",
            "Traceback (most recent call last):\n  File \"x.py\", line 1\nMemoryError",
            None,
        ),
        ("kernel oom killer", "Out of memory: Killed process 4242 (python) total-vm:123kB", None),
        (
            "cpu allocator",
            "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 1024 bytes.",
            None,
        ),
        ("bad_alloc", "terminate called after throwing an instance of 'std::bad_alloc'", None),
        (
            "grpc size",
            "grpc._channel._InactiveRpcError: status = StatusCode.RESOURCE_EXHAUSTED details = \"Received message larger than max (5 vs. 4)\"",
            None,
        ),
        (
            "quota",
            "google.api_core.exceptions.ResourceExhausted: 429 RESOURCE_EXHAUSTED: Quota exceeded",
            None,
        ),
        ("clean run", "epoch 10 loss 0.123\nsaved checkpoint to ckpt/10.pt\n", None),
        ("empty", "", None),
    ];

    #[test]
    fn signature_table() {
        for &(name, text, expected) in CASES {
            let found = scan_oom(text);
            assert_eq!(found.as_ref().map(|e| e.signature.as_str()), expected, "case {name}: {found:?}");
            if let Some(evidence) = found {
                assert!(text.contains(&evidence.line), "case {name}: line not from text");
            }
        }
    }

    #[test]
    fn last_matching_line_wins_and_is_cut() {
        let long = format!("CUDA out of memory {}", "é".repeat(600));
        let text = format!("cudaErrorMemoryAllocation first\n{long}\nexit\n");
        let evidence = scan_oom(&text).expect("evidence");
        assert_eq!(evidence.signature, "CUDA out of memory");
        assert!(evidence.line.len() <= EVIDENCE_LINE_BYTES_MAX);
        assert!(evidence.line.starts_with("CUDA out of memory"));
    }

    #[test]
    fn file_scan_reads_only_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("stderr.log");
        let mut text = String::from("CUDA out of memory at the very start\n");
        text.push_str(&"ordinary log line\n".repeat(1000));
        std::fs::write(&path, &text).expect("write");
        assert_eq!(scan_oom_file(&path, 4096).expect("scan"), None, "head is outside the tail");
        let found = scan_oom_file(&path, 1 << 22).expect("scan");
        assert_eq!(found.map(|e| e.signature), Some("CUDA out of memory".to_string()));
        // A tail starting mid-line still sees a signature that is whole in it.
        std::fs::write(&path, "prefix CUDA_ERROR_OUT_OF_MEMORY\nfine\n").expect("write");
        let found = scan_oom_file(&path, 30).expect("scan");
        assert_eq!(found.map(|e| e.line), Some("CUDA_ERROR_OUT_OF_MEMORY".to_string()));
        assert_eq!(scan_oom_file(&dir.path().join("missing"), 10).expect("scan"), None);
        // Through an open descriptor: the same tail, and the offset is untouched.
        let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
        std::io::Write::write_all(&mut file, b"x").expect("write at offset 0");
        let found = scan_oom_open_file(&file, 30).expect("scan fd");
        assert_eq!(found.map(|e| e.line), Some("CUDA_ERROR_OUT_OF_MEMORY".to_string()));
        assert_eq!(std::io::Seek::stream_position(&mut file).expect("offset"), 1);
        assert_eq!(scan_oom_open_file(&file, 3).expect("short tail"), None);
    }
}
