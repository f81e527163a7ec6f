//! rkv-model
