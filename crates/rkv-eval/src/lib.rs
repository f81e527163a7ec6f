//! rkv-eval
