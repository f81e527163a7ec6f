//! Loading from a GGUF file (ggml's format): metadata, config and quantised tensors.
//!
//! Owns GGUF naming (`blk.N.attn_q.weight`, ...) and the GGUF side of config parsing.
//! Parsing itself is candle's `gguf_file`.
//! Must not know: the maths of the layers.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::gguf_alignment::declares_zero_alignment;
use super::{le_u16s, TensorName, TensorSource, WeightMode};
use crate::config::{Arch, ModelConfig};
use crate::error::{candle_message, ModelError, Result};
use crate::linear::{Linear, Weight};
use crate::rope::RopeConfig;

pub struct GgufSource {
    /// The file's path, or a label such as `<memory>` for bytes given whole.
    path: PathBuf,
    content: Content,
    reader: BufReader<Box<dyn ReadSeek>>,
    mode: WeightMode,
    /// The bytes of the last tensor read whole ([`Self::raw_bytes`]), reused from tensor
    /// to tensor so that loading faults a buffer's pages in once, not once per tensor.
    scratch: Vec<u8>,
}

/// What the source reads from: a file, or bytes in memory.
pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

/// A file that knows its own position: candle's GGUF parser asks for the position at every
/// string (tens of thousands in a vocabulary), and `File` answers each with a system call.
struct Tracked {
    file: File,
    /// Offset of the next byte `read` returns.
    pos: u64,
}

impl Read for Tracked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Tracked {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.file.seek(to)?;
        Ok(self.pos)
    }

    fn stream_position(&mut self) -> std::io::Result<u64> {
        Ok(self.pos)
    }
}

impl GgufSource {
    pub fn open(path: &Path, mode: WeightMode) -> Result<Self> {
        if !path.exists() {
            return Err(ModelError::NotFound(path.to_path_buf()));
        }
        let file = File::open(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_reader(path, Box::new(Tracked { file, pos: 0 }), mode)
    }

    /// Reads a GGUF file held whole in memory; `label` names it in errors.
    pub fn from_bytes(label: &Path, bytes: Vec<u8>, mode: WeightMode) -> Result<Self> {
        Self::from_reader(label, Box::new(std::io::Cursor::new(bytes)), mode)
    }

    /// Parses the header of `inner` and checks that every tensor lies inside it. Every
    /// allocation the header drives is bounded by the length of `inner`: candle's reader
    /// refuses counts, strings and arrays that the bytes left cannot hold.
    fn from_reader(path: &Path, inner: Box<dyn ReadSeek>, mode: WeightMode) -> Result<Self> {
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut reader = BufReader::new(inner);
        if declares_zero_alignment(&mut reader) {
            return Err(ModelError::BadGguf {
                path: path.to_path_buf(),
                reason: "general.alignment is 0 (tensor data must be aligned to a positive \
                         number of bytes)"
                    .into(),
            });
        }
        let file_len = reader.seek(SeekFrom::End(0)).map_err(io)?;
        reader.seek(SeekFrom::Start(0)).map_err(io)?;
        // candle's reader may panic on other corrupt headers (it divided by a
        // `general.alignment` of 0, refused above): an error in the file, not a crash.
        let read =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)))
                .map_err(|payload| ModelError::BadGguf {
                path: path.to_path_buf(),
                reason: format!(
                    "the GGUF reader failed on the header: {}",
                    payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a malformed header".into())
                ),
            })?;
        let content = read.map_err(|e| {
            let reason = candle_message(&e);
            match reason.strip_prefix("unknown dtype for tensor ") {
                Some(code) => ModelError::UnsupportedQuant(code.to_string()),
                None => ModelError::BadGguf {
                    path: path.to_path_buf(),
                    reason,
                },
            }
        })?;
        for (name, info) in &content.tensor_infos {
            // Checked: a crafted shape or offset must not wrap past this test.
            let end = tensor_bytes(info)
                .and_then(|bytes| u64::try_from(bytes).ok())
                .and_then(|bytes| {
                    content
                        .tensor_data_offset
                        .checked_add(info.offset)?
                        .checked_add(bytes)
                });
            if end.is_none_or(|end| end > file_len) {
                return Err(ModelError::BadGguf {
                    path: path.to_path_buf(),
                    reason: format!("tensor `{name}` runs past the end of the file (truncated?)"),
                });
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader,
            mode,
            scratch: Vec::new(),
        })
    }

    pub fn content(&self) -> &Content {
        &self.content
    }

    fn meta(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn meta_usize(&self, key: &str) -> Result<usize> {
        let v = self
            .meta(key)
            .ok_or_else(|| ModelError::BadConfig(format!("GGUF metadata `{key}` is missing")))?;
        let n = match v {
            Value::U8(x) => *x as u64,
            Value::U16(x) => *x as u64,
            Value::U32(x) => *x as u64,
            Value::U64(x) => *x,
            Value::I8(x) if *x >= 0 => *x as u64,
            Value::I16(x) if *x >= 0 => *x as u64,
            Value::I32(x) if *x >= 0 => *x as u64,
            Value::I64(x) if *x >= 0 => *x as u64,
            other => {
                return Err(ModelError::BadConfig(format!(
                    "GGUF metadata `{key}` is not a count: {other:?}"
                )))
            }
        };
        Ok(n as usize)
    }

    fn meta_f32(&self, key: &str) -> Option<f32> {
        match self.meta(key)? {
            Value::F32(x) => Some(*x),
            Value::F64(x) => Some(*x as f32),
            _ => None,
        }
    }

    /// `{arch}.context_length`, when the file names an architecture and gives it.
    pub fn context_length(&self) -> Option<usize> {
        let arch = self.meta("general.architecture")?.to_string().ok()?;
        self.meta_usize(&format!("{arch}.context_length")).ok()
    }

    pub fn arch(&self) -> Result<Arch> {
        let name = self
            .meta("general.architecture")
            .and_then(|v| v.to_string().ok())
            .ok_or_else(|| ModelError::BadConfig("GGUF has no general.architecture".into()))?;
        Arch::parse(name)
    }

    /// The model configuration from the GGUF metadata.
    pub fn config(&mut self) -> Result<ModelConfig> {
        let arch = self.arch()?;
        let p = arch.name();
        let hidden_size = self.meta_usize(&format!("{p}.embedding_length"))?;
        let n_heads = self.meta_usize(&format!("{p}.attention.head_count"))?;
        let n_kv_heads = self
            .meta_usize(&format!("{p}.attention.head_count_kv"))
            .unwrap_or(n_heads);
        let head_dim = self
            .meta_usize(&format!("{p}.attention.key_length"))
            .unwrap_or(hidden_size / n_heads.max(1));
        let vocab_size = match self.meta("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) => a.len(),
            _ => self.meta_usize(&format!("{p}.vocab_size"))?,
        };
        let freq_factors = if self.content.tensor_infos.contains_key("rope_freqs.weight") {
            Some(self.raw_vector("rope_freqs.weight")?)
        } else {
            None
        };
        let cfg = ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: self.meta_usize(&format!("{p}.feed_forward_length"))?,
            n_layers: self.meta_usize(&format!("{p}.block_count"))?,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_norm_eps: self
                .meta_f32(&format!("{p}.attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-6),
            rope: RopeConfig {
                theta: self
                    .meta_f32(&format!("{p}.rope.freq_base"))
                    .unwrap_or(10000.0),
                style: arch.gguf_rope_style(),
                freq_factors,
            },
            max_context: self
                .meta_usize(&format!("{p}.context_length"))
                .unwrap_or(4096),
            tie_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn gguf_name(name: TensorName, bias: bool) -> String {
        let suffix = if bias { "bias" } else { "weight" };
        match name {
            TensorName::Embedding => format!("token_embd.{suffix}"),
            TensorName::OutputNorm => format!("output_norm.{suffix}"),
            TensorName::LmHead => format!("output.{suffix}"),
            TensorName::AttnNorm(i) => format!("blk.{i}.attn_norm.{suffix}"),
            TensorName::Q(i) => format!("blk.{i}.attn_q.{suffix}"),
            TensorName::K(i) => format!("blk.{i}.attn_k.{suffix}"),
            TensorName::V(i) => format!("blk.{i}.attn_v.{suffix}"),
            TensorName::O(i) => format!("blk.{i}.attn_output.{suffix}"),
            TensorName::QNorm(i) => format!("blk.{i}.attn_q_norm.{suffix}"),
            TensorName::KNorm(i) => format!("blk.{i}.attn_k_norm.{suffix}"),
            TensorName::FfnNorm(i) => format!("blk.{i}.ffn_norm.{suffix}"),
            TensorName::Gate(i) => format!("blk.{i}.ffn_gate.{suffix}"),
            TensorName::Up(i) => format!("blk.{i}.ffn_up.{suffix}"),
            TensorName::Down(i) => format!("blk.{i}.ffn_down.{suffix}"),
        }
    }

    /// Tensor `name`'s description, checked non-empty.
    fn info(&self, name: &str) -> Result<&TensorInfo> {
        let Some(info) = self.content.tensor_infos.get(name) else {
            return Err(ModelError::MissingTensor(name.to_string()));
        };
        // candle views the bytes it read as blocks of the tensor's type through a raw
        // pointer, which for no bytes at all is a dangling, misaligned one (undefined
        // behaviour; found by fuzzing). No tensor rkv reads may be empty anyway.
        if info.shape.dims().contains(&0) {
            return Err(ModelError::BadGguf {
                path: self.path.clone(),
                reason: format!(
                    "tensor `{name}` has no elements (shape {:?})",
                    info.shape.dims()
                ),
            });
        }
        Ok(info)
    }

    /// Tensor `name` as stored (checked non-empty).
    pub(crate) fn qtensor(&mut self, name: &str) -> Result<QTensor> {
        self.info(name)?;
        self.content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .map_err(|e| ModelError::BadGguf {
                path: self.path.clone(),
                reason: format!("tensor `{name}`: {}", candle_message(&e)),
            })
    }

    /// Tensor `name`'s bytes as stored (checked non-empty), read into the reused
    /// scratch buffer: the weights rkv packs itself are built from these, with no
    /// copy in between.
    fn raw_bytes(&mut self, name: &str) -> Result<&[u8]> {
        let info = self.info(name)?;
        // Both in range: `from_reader` checked that the tensor lies inside the file.
        let len = tensor_bytes(info).unwrap_or(0);
        let start = self.content.tensor_data_offset + info.offset;
        let io = |source| ModelError::Io {
            path: self.path.clone(),
            source,
        };
        if self.scratch.len() < len {
            self.scratch.resize(len, 0);
        }
        self.reader.seek(SeekFrom::Start(start)).map_err(io)?;
        self.reader
            .read_exact(&mut self.scratch[..len])
            .map_err(io)?;
        Ok(&self.scratch[..len])
    }

    fn raw_vector(&mut self, name: &str) -> Result<Vec<f32>> {
        dequantize_f32(&self.qtensor(name)?)
    }
}

/// Bytes of a tensor's data, `None` where its shape overflows.
fn tensor_bytes(info: &TensorInfo) -> Option<usize> {
    let n = info
        .shape
        .dims()
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))?;
    (n / info.ggml_dtype.block_size()).checked_mul(info.ggml_dtype.type_size())
}

/// Every element of `t` as f32, flattened.
fn dequantize_f32(t: &QTensor) -> Result<Vec<f32>> {
    Ok(t.dequantize(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

fn check_supported(name: &str, dtype: GgmlDType) -> Result<()> {
    use GgmlDType::*;
    match dtype {
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2K | Q3K | Q4K | Q5K | Q6K => Ok(()),
        other => Err(ModelError::UnsupportedDtype {
            tensor: name.to_string(),
            dtype: format!("{other:?}"),
        }),
    }
}

impl TensorSource for GgufSource {
    fn has(&self, name: TensorName, bias: bool) -> bool {
        self.content
            .tensor_infos
            .contains_key(&Self::gguf_name(name, bias))
    }

    fn linear(
        &mut self,
        name: TensorName,
        rows: usize,
        cols: usize,
        with_bias: bool,
    ) -> Result<Linear> {
        let wname = Self::gguf_name(name, false);
        let info = self.info(&wname)?;
        let (dtype, dims) = (info.ggml_dtype, info.shape.dims().to_vec());
        if dims != [rows, cols] {
            return Err(ModelError::BadShape {
                name: wname,
                got: dims,
                want: vec![rows, cols],
            });
        }
        check_supported(&wname, dtype)?;
        // Dense weights are held as stored (f16, bf16, f32); everything is f32 in
        // `WeightMode::F32`. rkv's own formats are packed straight from the file's bytes.
        let weight = match (self.mode, dtype) {
            (WeightMode::F32, _) | (_, GgmlDType::F32) => {
                Weight::F32(dequantize_f32(&self.qtensor(&wname)?)?)
            }
            (_, GgmlDType::F16) => Weight::F16(
                le_u16s(self.raw_bytes(&wname)?)
                    .map(half::f16::from_bits)
                    .collect(),
            ),
            (_, GgmlDType::BF16) => Weight::BF16(
                le_u16s(self.raw_bytes(&wname)?)
                    .map(half::bf16::from_bits)
                    .collect(),
            ),
            (_, t) if Weight::native(t) => {
                Weight::from_ggml_bytes(t, self.raw_bytes(&wname)?, rows)?
            }
            _ => Weight::from_qtensor(self.qtensor(&wname)?)?,
        };
        let bias = if with_bias {
            Some(self.vector_named(&Self::gguf_name(name, true), rows)?)
        } else {
            None
        };
        Linear::new(rows, cols, weight, bias)
    }

    fn vector(&mut self, name: TensorName, len: usize) -> Result<Vec<f32>> {
        self.vector_named(&Self::gguf_name(name, false), len)
    }
}

impl GgufSource {
    fn vector_named(&mut self, name: &str, len: usize) -> Result<Vec<f32>> {
        let v = self.raw_vector(name)?;
        if v.len() != len {
            return Err(ModelError::BadShape {
                name: name.to_string(),
                got: vec![v.len()],
                want: vec![len],
            });
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A header whose `general.alignment` is 0 (candle's reader divides by it) is a
    /// "bad GGUF" error that says so, refused before candle reads it.
    #[test]
    fn zero_alignment_is_an_error() {
        let mut tmp = tempfile::NamedTempFile::new().expect("temp file");
        let key = b"general.alignment";
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(3u32.to_le_bytes()); // version
        bytes.extend(0u64.to_le_bytes()); // tensors
        bytes.extend(1u64.to_le_bytes()); // metadata entries
        bytes.extend((key.len() as u64).to_le_bytes());
        bytes.extend(key);
        bytes.extend(4u32.to_le_bytes()); // type u32
        bytes.extend(0u32.to_le_bytes());
        tmp.write_all(&bytes).expect("write");
        let err = GgufSource::open(tmp.path(), WeightMode::Native)
            .err()
            .expect("refused");
        match &err {
            ModelError::BadGguf { reason, .. } => {
                assert!(reason.contains("general.alignment is 0"), "{err}")
            }
            _ => panic!("not a bad-GGUF error: {err}"),
        }
    }

    /// A v3 header: the tensor and metadata counts, then `rest` as it is.
    fn header(tensors: u64, entries: u64, rest: &[u8]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(entries.to_le_bytes());
        b.extend(rest);
        b
    }

    /// A metadata key, as GGUF writes strings.
    fn key(k: &str) -> Vec<u8> {
        let mut b = (k.len() as u64).to_le_bytes().to_vec();
        b.extend(k.as_bytes());
        b
    }

    /// The reason of the bad-GGUF error that opening `bytes` (from memory) must give.
    fn refusal(bytes: Vec<u8>) -> String {
        match GgufSource::from_bytes(Path::new("<test>"), bytes, WeightMode::Native) {
            Err(ModelError::BadGguf { reason, .. }) => reason,
            Err(e) => panic!("not a bad-GGUF error: {e}"),
            Ok(_) => panic!("a hostile header was accepted"),
        }
    }

    /// Counts and lengths that a small file cannot back are refused from the header,
    /// before anything is sized by them (an attempt would abort the process: 2^60
    /// entries of any type do not fit in memory).
    #[test]
    fn header_counts_past_the_file_are_refused_before_allocating() {
        let padding = [0u8; 64];
        let r = refusal(header(1 << 60, 0, &padding));
        assert!(r.contains("tensor_count"), "{r}");
        let r = refusal(header(0, 1 << 62, &padding));
        assert!(r.contains("metadata_kv_count"), "{r}");
        // Counts under candle's caps but past what 64 bytes can hold.
        let r = refusal(header(1 << 20, 1 << 20, &padding));
        assert!(r.contains("needs at least"), "{r}");
    }

    #[test]
    fn huge_strings_and_arrays_are_refused_before_allocating() {
        // A key whose length is 2^62.
        let mut rest = (1u64 << 62).to_le_bytes().to_vec();
        rest.extend([b'k'; 32]);
        let r = refusal(header(0, 1, &rest));
        assert!(r.contains("string length"), "{r}");
        // A string value of 2^40 bytes, then of a length just past the file.
        for len in [1u64 << 40, 100] {
            let mut rest = key("general.name");
            rest.extend(8u32.to_le_bytes());
            rest.extend(len.to_le_bytes());
            rest.extend([b'x'; 32]);
            let r = refusal(header(0, 1, &rest));
            assert!(r.contains("string length"), "{len}: {r}");
        }
        // Arrays of 2^62 u8, of 2^29 strings, of 2^40 arrays: each element takes bytes the
        // file does not have.
        for (elem, len) in [(0u32, 1u64 << 62), (8, 1 << 29), (9, 1 << 40)] {
            let mut rest = key("tokenizer.ggml.tokens");
            rest.extend(9u32.to_le_bytes());
            rest.extend(elem.to_le_bytes());
            rest.extend(len.to_le_bytes());
            rest.extend([0u8; 32]);
            let r = refusal(header(0, 1, &rest));
            assert!(r.contains("array"), "type {elem} x {len}: {r}");
        }
    }

    /// Arrays nested past any real file's depth are refused, not recursed into until the
    /// stack runs out.
    #[test]
    fn deeply_nested_arrays_are_refused() {
        let mut rest = key("nested");
        rest.extend(9u32.to_le_bytes());
        for _ in 0..200 {
            rest.extend(9u32.to_le_bytes());
            rest.extend(1u64.to_le_bytes());
        }
        rest.extend([0u8; 16]);
        let r = refusal(header(0, 1, &rest));
        assert!(r.contains("depth"), "{r}");
    }

    /// Tensor infos: too many dimensions, dimensions whose product wraps, and an offset
    /// past the end are each refused before any tensor is read.
    #[test]
    fn tensor_infos_past_the_file_are_refused() {
        let info = |dims: &[u64], offset: u64| {
            let mut b = key("t");
            b.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                b.extend(d.to_le_bytes());
            }
            b.extend(0u32.to_le_bytes()); // F32
            b.extend(offset.to_le_bytes());
            b.extend([0u8; 64]);
            b
        };
        let r = refusal(header(1, 0, &info(&[1; 9], 0)));
        assert!(r.contains("dimensions"), "{r}");
        for (dims, offset) in [
            (vec![1u64 << 40, 1 << 40], 0u64),
            (vec![u64::MAX, 2], 0),
            (vec![4], u64::MAX - 2),
            (vec![1 << 30], 0),
        ] {
            let r = refusal(header(1, 0, &info(&dims, offset)));
            assert!(r.contains("runs past the end"), "{dims:?} at {offset}: {r}");
        }
    }

    /// A tensor with a dimension of 0 is an error when read, before candle views its
    /// (empty) bytes through a misaligned pointer. Found by fuzzing `gguf_model`.
    #[test]
    fn empty_tensors_are_refused_when_read() {
        let mut rest = key("t");
        rest.extend(2u32.to_le_bytes());
        rest.extend(0u64.to_le_bytes());
        rest.extend(4u64.to_le_bytes());
        rest.extend(0u32.to_le_bytes()); // F32
        rest.extend(0u64.to_le_bytes());
        rest.extend([0u8; 64]);
        let mut src =
            GgufSource::from_bytes(Path::new("<test>"), header(1, 0, &rest), WeightMode::F32)
                .expect("an empty tensor is within the file");
        match src.raw_vector("t") {
            Err(ModelError::BadGguf { reason, .. }) => {
                assert!(reason.contains("no elements"), "{reason}")
            }
            other => panic!("an empty tensor was read: {other:?}"),
        }
    }

    /// The tracked position is the file's own through reads and seeks of every kind, seen
    /// through a small buffer as the parser sees it.
    #[test]
    fn tracked_position_follows_the_file() {
        let mut tmp = tempfile::NamedTempFile::new().expect("temp file");
        let bytes: Vec<u8> = (0..200u8).collect();
        tmp.write_all(&bytes).expect("write");
        let open = || File::open(tmp.path()).expect("open");
        let mut ours = BufReader::with_capacity(
            7,
            Tracked {
                file: open(),
                pos: 0,
            },
        );
        let mut plain = BufReader::with_capacity(7, open());
        let steps = [
            SeekFrom::Current(0),
            SeekFrom::Start(50),
            SeekFrom::Current(-3),
            SeekFrom::End(-10),
            SeekFrom::Start(5),
        ];
        let mut buf = [0u8; 11];
        for step in steps {
            for r in [&mut ours as &mut dyn SeekRead, &mut plain] {
                r.seek(step).expect("seek");
            }
            for n in [3, 11, 1] {
                let a = ours.read(&mut buf[..n]).expect("read");
                let got = buf[..a].to_vec();
                let b = plain.read(&mut buf[..n]).expect("read");
                assert_eq!((a, got), (b, buf[..b].to_vec()));
                assert_eq!(
                    ours.stream_position().expect("position"),
                    plain.stream_position().expect("position")
                );
            }
        }
    }

    trait SeekRead: Read + Seek {}
    impl<T: Read + Seek> SeekRead for T {}
}
