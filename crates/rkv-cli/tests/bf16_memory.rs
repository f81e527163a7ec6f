//! A Hugging Face checkpoint in bf16 loads holding bf16: the process's peak RSS stays
//! near the safetensors file's size, not the two to four times of reading the file whole
//! and widening it to f32. The model (a Llama of about 100M random parameters, 200 MB)
//! is written here; `rkv bench decode` reports the peak RSS.

mod common;

use std::path::Path;

use common::rkv;
use serde_json::json;

const VOCAB: usize = 64;
const HIDDEN: usize = 1024;
const FFN: usize = 2816;
const LAYERS: usize = 8;
const HEADS: usize = 8;
const KV_HEADS: usize = 2;

/// Random bf16 values of magnitude below 0.05, as little-endian bytes.
fn random_bf16(n: usize, seed: &mut u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * n);
    for _ in 0..n {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (*seed >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
        let v = half::bf16::from_f32((u - 0.5) * 0.1);
        out.extend(v.to_bits().to_le_bytes());
    }
    out
}

/// Writes `config.json`, `tokenizer.json` and a bf16 `model.safetensors` into `dir`;
/// returns the safetensors file's size.
fn write_model(dir: &Path) -> u64 {
    let head_dim = HIDDEN / HEADS;
    let mut tensors: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".into(), vec![HIDDEN]),
    ];
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        tensors.extend([
            (format!("{p}.input_layernorm.weight"), vec![HIDDEN]),
            (format!("{p}.self_attn.q_proj.weight"), vec![HIDDEN, HIDDEN]),
            (
                format!("{p}.self_attn.k_proj.weight"),
                vec![KV_HEADS * head_dim, HIDDEN],
            ),
            (
                format!("{p}.self_attn.v_proj.weight"),
                vec![KV_HEADS * head_dim, HIDDEN],
            ),
            (format!("{p}.self_attn.o_proj.weight"), vec![HIDDEN, HIDDEN]),
            (format!("{p}.post_attention_layernorm.weight"), vec![HIDDEN]),
            (format!("{p}.mlp.gate_proj.weight"), vec![FFN, HIDDEN]),
            (format!("{p}.mlp.up_proj.weight"), vec![FFN, HIDDEN]),
            (format!("{p}.mlp.down_proj.weight"), vec![HIDDEN, FFN]),
        ]);
    }
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, shape) in &tensors {
        let bytes = 2 * shape.iter().product::<usize>();
        header.insert(
            name.clone(),
            json!({"dtype": "BF16", "shape": shape, "data_offsets": [at, at + bytes]}),
        );
        at += bytes;
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(dir.join("model.safetensors")).expect("create"),
    );
    use std::io::Write;
    f.write_all(&(header.len() as u64).to_le_bytes())
        .expect("write");
    f.write_all(header.as_bytes()).expect("write");
    let mut seed = 7u64;
    for (name, shape) in &tensors {
        let n: usize = shape.iter().product();
        if name.ends_with("norm.weight") {
            let one = half::bf16::from_f32(1.0).to_bits().to_le_bytes();
            for _ in 0..n {
                f.write_all(&one).expect("write");
            }
        } else {
            f.write_all(&random_bf16(n, &mut seed)).expect("write");
        }
    }
    f.flush().expect("flush");
    drop(f);
    let config = json!({
        "model_type": "llama", "vocab_size": VOCAB, "hidden_size": HIDDEN,
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "max_position_embeddings": 512,
        "tie_word_embeddings": true, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config");
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), json!(0));
    for i in 1..VOCAB {
        vocab.insert(format!("w{i}"), json!(i));
    }
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).expect("tokenizer");
    std::fs::metadata(dir.join("model.safetensors"))
        .expect("size")
        .len()
}

#[test]
fn a_bf16_checkpoint_loads_at_about_its_own_size() {
    let dir = tempfile::tempdir().expect("temp dir");
    let size = write_model(dir.path());
    let model = dir.path().to_string_lossy().into_owned();
    let args = [
        "bench",
        "decode",
        "--model",
        &model,
        "--depths",
        "0",
        "--tokens",
        "4",
        "--repeat",
        "1",
        "--threads",
        "2",
        "--json",
    ];
    let (code, out, err) = rkv(&args);
    assert_eq!(code, 0, "{err}");
    let row: serde_json::Value = serde_json::from_str(out.lines().next().expect("a row"))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    let rss = row["peak_rss_bytes"].as_u64().expect("peak_rss_bytes");
    let mb = |b: u64| b as f64 / 1e6;
    eprintln!(
        "bf16 checkpoint of {:.0} MB: peak RSS {:.0} MB",
        mb(size),
        mb(rss)
    );
    // The weights (the file's size) plus the process, the tensor being read and the
    // runtime's buffers; widening to f32 alone would need twice the file.
    assert!(
        rss < size + size / 4 + 120_000_000,
        "peak RSS {:.0} MB for a {:.0} MB bf16 checkpoint",
        mb(rss),
        mb(size)
    );
}
