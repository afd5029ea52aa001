/// PCI device IDs (`ibv_device_attr.vendor_part_id`; sysfs `hca_type` reads
/// `MT<id>`) of mlx5 devices without the dynamically connected transport:
/// ConnectX-4 Lx and its virtual function. Every other mlx5 device (Connect-IB,
/// ConnectX-4 and later, BlueField) has DC. Shared with the facade's build
/// script, which `include!`s this file to ignore the DC conformance scenario
/// on such a device.
pub const NO_DC_PARTS: &[u32] = &[4117, 4118];
