// Placeholder translation unit until the CPU ops land.
namespace ds::cpu {
int kernels_cpu_version() { return 1; }
}  // namespace ds::cpu
