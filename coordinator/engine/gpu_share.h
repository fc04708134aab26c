// How local CUDA workers that share a GPU split --gpu-memory-fraction (`serve --devices 0,0`).
//
// Each CUDA worker sizes its pools from min(fraction x total, free) - weights - reserve
// (worker/daemon/stage_loader.cpp). Two workers on one GPU given the same fraction would each
// claim nearly the whole share, and whichever loads second finds less free than it planned
// for. So the coordinator gives every worker its own fraction:
//
//   rule: the workers on one device split the fraction in proportion to their layer counts
//         (the last stage's MTP block counts as one more layer, since it has its own KV pool).
//
// Layer count is the right weight because the pools (KV blocks per attention layer, GDN state
// per GDN layer) dominate a worker's memory and every worker must hold the same number of
// blocks and slots (the scheduler plans with the minimum over the workers). The shares on one
// device add up to the fraction, so the loads no longer race for the same bytes. A worker alone
// on its GPU keeps the whole fraction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/stage_types.h"

namespace ds {

// The workers' own default (WorkerOptions::gpu_memory_fraction): the base of the split when
// the operator did not pass --gpu-memory-fraction.
constexpr double kDefaultGpuMemoryFraction = 0.9;

// The fraction of its GPU's memory each rank may use. `device_of_rank[r]` is rank r's GPU,
// `layout[r]` its layers, `has_mtp`: the last stage also runs an MTP block. Throws ConfigError
// when the sizes differ, the fraction is not in (0, 1] or a device id is negative.
std::vector<double> split_gpu_memory_fraction(double fraction, const std::vector<int>& device_of_rank,
                                              const std::vector<StageRange>& layout, bool has_mtp);

// Rank r's GPU: `devices[r]` when given (--devices), else GPU r.
std::vector<int> device_of_each_rank(const std::vector<int>& devices, uint32_t n_ranks);

// The --gpu-memory-fraction value each local worker is started with, as text (rounded down to
// 1e-6, so the shares on one GPU never add up to more than the fraction), or none at all: cpu
// workers, and cuda workers each alone on its GPU with no fraction given (they keep their own
// default and DELTASERVE_WORKER_* settings). Shared GPUs without a fraction split
// kDefaultGpuMemoryFraction.
std::vector<std::string> gpu_fraction_flags(const std::string& backend, std::optional<double> fraction,
                                            const std::vector<int>& devices, const std::vector<StageRange>& layout,
                                            bool has_mtp);

// A start-up hint for CUDA workers that share a GPU without CUDA MPS (`mps_running` false): their
// kernels then time-share the GPU instead of overlapping (prefill is slower than under MPS:
// docs/history/performance-2026-11.md, session 6). Empty when there is nothing to say.
std::string shared_gpu_hint(const std::string& backend, const std::vector<int>& devices, uint32_t n_ranks,
                            bool mps_running);

// Decode groups for `serve --decode-groups auto` (SchedulerConfig::decode_groups): 2 when the
// workers compute on separate devices, so one group decodes on each at once (one batch through
// two stages leaves each device idle half of every step): cuda workers on two or more GPUs, or
// two or more cpu workers whose threads fit the host's `hardware_threads`. 1 otherwise: on one
// device two half batches cost more than one batch (each re-reads the weights). Measured on cpu
// workers: docs/history/performance-2026-11.md, session 7; on GPUs: docs/PERFORMANCE.md, Decisions
// measured, decode groups.
uint32_t auto_decode_groups(const std::string& backend, const std::vector<int>& devices, uint32_t n_ranks,
                            uint32_t threads_per_worker, uint32_t hardware_threads);

// Whether a CUDA MPS control daemon seems to serve this process: its pipe directory
// (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps) holds a control socket. `pipe_env` is the
// variable's value (nullptr when unset).
bool mps_control_running(const char* pipe_env);

}  // namespace ds
