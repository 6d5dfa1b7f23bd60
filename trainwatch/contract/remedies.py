"""What to change, once per bottleneck: the one text for alerts, dashboards and the CLI.

Plain constants and no imports, so the rule generator (``prometheus.rulegen``), the dashboards
(``grafana/``) and ``trainwatch diagnose`` all read these bytes; the rules also carry each text
in their ``remedy`` annotation, which is what ``trainwatch diagnose`` shows for a deployed alert.
"""

DATALOADER = (
    "Feed the GPU faster: raise DataLoader num_workers (with persistent_workers=True and a "
    "prefetch_factor of 2-4), read from a local NVMe copy of the data instead of network "
    "storage, put a caching data layer in front of remote data, and load asynchronously so "
    "the next batch is ready before the step ends.")

# Why the loader is slow (trainwatch/diagnose/loader_cause.py): one remedy per cause, each
# only its own. TOO_FEW_WORKERS is filled in with the trial's own figures.
LOADER_TOO_FEW_WORKERS = (
    "Raise DataLoader num_workers from {workers} to ~{suggested} (the node has {idle} idle "
    "cores and every worker is busy computing), with persistent_workers=True so workers are "
    "not started again every epoch.")

LOADER_DECODE_BOUND = (
    "Spend less CPU per sample, since the node has no idle core for more workers: store the "
    "data in a columnar format that needs no decoding in Python (Arrow), pre-augment it "
    "offline, or run the augmentations on the GPU (torchvision.transforms.v2 on CUDA tensors, "
    "NVIDIA DALI).")

LOADER_STORAGE_BOUND = (
    "The local disk is the limit: copy the data set to a local NVMe drive (or into RAM if it "
    "fits) and read it in larger sequential chunks (shards of tens to hundreds of MB: "
    "WebDataset tar shards, Arrow/Parquet files) instead of many small random reads.")

LOADER_REMOTE_STORAGE = (
    "The data comes over the network and the link is nearly full: put a caching layer in "
    "front of the remote storage (e.g. Alluxio, or a local copy made once per node), "
    "prefetch the next shards ahead of use, and pack small files into larger shards so "
    "fewer, bigger reads cross the network.")

LOADER_LATENCY_BOUND = (
    "The workers mostly wait on something outside the node's CPUs and disks (a remote "
    "service, small network reads, a sleep): keep more requests in flight with more workers "
    "and a larger prefetch_factor, and load asynchronously (overlap requests inside a worker "
    "with threads or asyncio).")

MEMORY_COPIES = (
    "Make host<->device copies cheap: use pinned memory (DataLoader pin_memory=True) with "
    ".to(device, non_blocking=True), create tensors on the device (torch.zeros(..., "
    "device=device)) instead of copying them there, use torch.as_tensor rather than "
    "torch.tensor to avoid an extra copy, and keep metrics on the device until they are "
    "logged (every .item() waits for the GPU).")

BUSY_GPU = (
    "Make the GPU work count: torch.compile the model, use mixed precision (torch.autocast "
    "with bfloat16/float16) so tensor cores do the matmuls, and spread the work over more "
    "GPUs with DistributedDataParallel.")

BUSY_CPU = (
    "Spend less CPU per sample: read columnar data (Arrow/Parquet) instead of decoding rows "
    "in Python, preload a better allocator (jemalloc or tcmalloc via LD_PRELOAD), keep "
    "num_workers within the node's cores, and move augmentations to the GPU.")

GPU_MEMORY = (
    "Free GPU memory: lower the batch size and keep the effective batch with gradient "
    "accumulation, use mixed precision, checkpoint activations "
    "(torch.utils.checkpoint), and do not keep graph-holding tensors across steps "
    "(log loss.item(), not loss).")

HOST_MEMORY = (
    "Free host memory: lower num_workers and prefetch_factor (every worker holds its own "
    "copy of the Dataset and its prefetched batches), share large read-only data through "
    "memory-mapped files (numpy.memmap, Arrow) instead of Python objects, and look for a "
    "leak that grows with the step count.")

UNDERUTILIZED_GPU = (
    "Find the phase that dominates the step on the Trial profile dashboard: dataloader_next "
    "means the data loader is too slow, to_device/from_device means memory copies; if "
    "neither, the batch is too small or Python overhead dominates: raise the batch size and "
    "torch.compile the model.")

LAUNCH_BOUND_GPU = (
    "The GPU looks busy but most of its SMs idle: kernels too small or launch-bound. Raise "
    "the batch size, capture the step with CUDA graphs (torch.compile(mode=\"reduce-overhead\")), "
    "fuse small ops with torch.compile, and remove host syncs from the step (.item(), "
    "print(tensor), .cpu(), torch.cuda.synchronize()).")

TENSOR_CORES_IDLE = (
    "Train in bf16/fp16 with autocast: the SMs are busy but the tensor cores are idle, so "
    "matmuls and convolutions run on the slow FP32 path. Wrap the forward pass in "
    "torch.autocast(\"cuda\", dtype=torch.bfloat16) (fp16 needs a GradScaler), or at least allow "
    "TF32 (torch.backends.cuda.matmul.allow_tf32 = True).")

# "GPU busy, MFU low" (contract.checks.LOW_MFU): no alert, a verdict of `trainwatch diagnose`.
LOW_MFU = (
    "The GPU is busy, but on inefficient kernels: little of its peak arithmetic reaches the "
    "model. Run the matmuls on tensor cores in a lower precision (torch.autocast with "
    "bfloat16; for an fp32 model at least torch.backends.cuda.matmul.allow_tf32 = True), raise "
    "the batch size so each kernel has more work, use fused and flash kernels "
    "(F.scaled_dot_product_attention, fused optimizers such as AdamW(fused=True)) and "
    "torch.compile the model, channels-last for convolutions. Then record a kernel trace with "
    "`trainwatch profile` and look for many tiny kernels or time outside the matmuls. Check "
    "the FLOPs figure and precision the trial declared too: an undercounted model reads low.")

STRAGGLER = (
    "Find what differs on the slow rank: its node's CPU and data loader share (another job or "
    "too few cores for its workers: the Node dashboard), its GPU's throttle reasons and SM "
    "activity (a throttled or shared GPU), and its data shard (longer sequences or larger "
    "files on that rank: balance the shards or bucket by length); drain a node that stays "
    "slow, since every rank of a synchronous trial runs at the slowest rank's pace.")

SCALING = (
    "Make each rank do more work per exchange: raise the per-GPU batch and scale the global "
    "batch with the number of GPUs (weak scaling), accumulate gradients over several steps "
    "before each all-reduce (DDP no_sync), compress gradients (DDP comm hooks: fp16/bf16 or "
    "PowerSGD), use the GPUs of one machine before spreading over many, and put NCCL on the "
    "fastest network interface (NCCL_SOCKET_IFNAME, InfiniBand where there is one). If the "
    "loader is the limit instead, test with synthetic data to confirm it.")

# A slow multi-rank exchange whose nodes' links run near their speed
# (trainwatch/diagnose/exchange.py): only the fixes that move fewer bytes or use a faster link.
EXCHANGE_NETWORK_BOUND = (
    "The network is the limit: the trial's nodes send or receive near their links' speed. Move "
    "fewer bytes per sample: a larger batch per GPU (and gradient accumulation, DDP no_sync, "
    "so gradients are exchanged once every few steps), compressed gradients (DDP comm hooks: "
    "fp16/bf16 or PowerSGD) and larger gradient buckets (DDP bucket_cap_mb) so the all-reduce "
    "overlaps backward in fewer, fuller messages; or use a faster interconnect: put NCCL on "
    "the fastest interface (NCCL_SOCKET_IFNAME, InfiniBand/RoCE with NCCL_IB_HCA) and keep "
    "the ranks of one trial on the GPUs of as few machines as possible.")

ROW_REMAP_PENDING = (
    "Reset the GPU when its jobs end (drain the node, then nvidia-smi -r or reboot): a memory "
    "row failed and its remap to a spare takes effect only at the next reset; until then "
    "the bad row is still in use.")

ROW_REMAP_FAILED = (
    "Drain the node and have the GPU serviced: a memory row failed and could not be remapped "
    "(no spare rows left), so the GPU keeps hitting uncorrectable errors.")

THROTTLED_GPU = (
    "Check the cooling (fans, airflow, inlet temperature) and the power delivery of the node; "
    "hw_slowdown and hw_power_brake_slowdown come from the board or the chassis, the thermal "
    "reasons from the GPU's temperature.")

KEY_SHARED = (
    "Give each process its own trial or rank: set TRAINWATCH_TRIAL (or the trial name passed "
    "to the library) per run and let each rank keep its own RANK (torchrun sets it); stop a "
    "duplicate launch of the same trial.")

TRIAL_FAILED = (
    "Read the trial's log for the exception (trainwatch_trial_info has nodename and pid), fix "
    "it and restart the trial; its group was left so this alert and `trainwatch diagnose` can "
    "say how it ended. Deleting the group (`trainwatch gc`, or the DELETE that `trainwatch "
    "diagnose` prints) resolves the alert.")

EXITED_LEFT = (
    "The trial ended and said so in its final push; its group stays until `trainwatch gc` "
    "retires it (the stack and the chart run it on a schedule), and Prometheus keeps its "
    "samples for `trainwatch diagnose`, `report` and `compare`.")

STALE_TRIAL = (
    "The trial stopped pushing and never said it ended (no trainwatch_trial_exit): it "
    "crashed, was killed, hangs, or cannot reach the Pushgateway. Check its process (trainwatch_trial_info has nodename and "
    "pid) and its log. `trainwatch gc` deletes its group after --max-age (the alert then "
    "resolves); once the trial is gone, deleting the group by hand resolves it sooner. A pulled "
    "trial (TRAINWATCH_PULL_PORT) has no group: the alert resolves when its pod or scrape "
    "target goes away.")

# How to delete a stale trial's Pushgateway group (docs/runbooks.md#trainwatchtrialstale quotes
# it with PUSHGATEWAY, E, T and R; `trainwatch diagnose` fills them in).
DELETE_GROUP = ("curl -X DELETE {pushgateway}/metrics/job/trainwatch_trial/experiment/{experiment}"
                "/trial/{trial}/rank/{rank}")

SLOWER_THAN_BASELINE = (
    "Find what changed since the last good run: `trainwatch check E/T` ranks the phases by the "
    "milliseconds per step each lost against the baseline run nearest the median (a new data "
    "augmentation or num_workers shows in dataloader_next, a library upgrade or a throttling "
    "GPU in train_batch); then compare the two runs' code, library versions, data and nodes.")
PUSH_FAILING = (
    "Check the Pushgateway URL the trial uses (TRAINWATCH_PUSHGATEWAY), the network path or "
    "policy between the trial and the Pushgateway, and the Pushgateway's log. Training is "
    "not slowed, but its timings reach Prometheus late or not at all.")

EXPORTER_DOWN = (
    "Check the trainwatch-exporter process (systemd unit or DaemonSet pod) on the node and "
    "its log; while it is down, no GPU or host metrics of that node are collected and the "
    "GPU and host alerts cannot fire there.")

COLLECTOR_FAILING = (
    "The exporter logs the error when it starts or changes, at most one warning a minute per "
    "collector (the others at debug, counted in "
    "trainwatch_scrape_collector_warnings_suppressed_total), and a line when the collector "
    "recovers. For the gpu collector it is "
    "usually NVML: a driver/library version mismatch after a driver upgrade (reload the driver or "
    "reboot) or a driver unloaded on a node that had GPUs.")

NO_GPU_METRICS = (
    "No GPU series joins this trial (trainwatch_trial_gpu_info): it computes on the CPU, or "
    "trainwatch-exporter does not run on its node.")
