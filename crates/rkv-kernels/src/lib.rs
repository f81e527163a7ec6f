//! rkv-kernels
