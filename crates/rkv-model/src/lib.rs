//! rkv-model: weights, tokenizer, chat template and the model architectures.
//!
//! Architectures are written once over a quantisation-agnostic linear layer and call the
//! engine's attention through the [`attention::Attention`] trait.
//! Must not know: KV caches, policies, batching, HTTP.

pub mod attention;
pub mod chat_template;
pub mod config;
pub mod error;
pub mod hub;
pub mod linear;
pub mod model;
pub mod norm;
pub mod rope;
mod template_bounds;
mod template_filters;
mod template_guard;
mod template_json;
pub mod tokenizer;
pub mod transformer;
pub mod untrusted;
pub mod weights;

pub use attention::{Attention, AttentionShape};
pub use config::{Arch, ModelConfig};
pub use error::{ModelError, Result};
pub use model::{load, load_tokenizer, LoadedModel, ModelTokenizer};
pub use tokenizer::Tokenizer;
pub use transformer::Transformer;
pub use weights::WeightMode;
