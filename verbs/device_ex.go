package verbs

// QueryDeviceExInput is the input of QueryDeviceEx (struct
// ibv_query_device_ex_input). CompMask is for extensions; none are
// defined, so it must be 0.
type QueryDeviceExInput struct {
	CompMask uint32
}

// DeviceAttrEx holds a device's attributes with the extended ones
// (struct ibv_device_attr_ex, from ibv_query_device_ex). A field the
// device does not report is 0.
type DeviceAttrEx struct {
	OrigAttr DeviceAttr // what QueryDevice returns (orig_attr)
	CompMask uint32
	ODPCaps  ODPCaps // on-demand paging; 0: none
	// CompletionTimestampMask is the mask of the completion timestamps
	// a CQEx reads (ibv_wc_read_completion_ts); 0 when the device does
	// not stamp completions.
	CompletionTimestampMask uint64
	// HCACoreClock is the frequency, in kHz, of the clock completion
	// timestamps count (0: none).
	HCACoreClock uint64
	// DeviceCapFlagsEx holds the device capability flags, all 64 bits:
	// the low 32 are OrigAttr.DeviceCapFlags, the high ones flags such
	// as DevicePCIWriteEndPadding.
	DeviceCapFlagsEx uint64
	TSOCaps          TSOCaps
	RSSCaps          RSSCaps
	MaxWQTypeRQ      uint32
	PacketPacingCaps PacketPacingCaps
	RawPacketCaps    uint32 // enum ibv_raw_packet_caps
	TMCaps           TMCaps
	CQModCaps        CQModerationCaps
	// MaxDMSize is the device memory, in bytes, programs may allocate
	// (ibv_alloc_dm); 0: none.
	MaxDMSize     uint64
	PCIAtomicCaps PCIAtomicCaps
	XRCODPCaps    uint32 // enum ibv_odp_transport_cap_bits
	// PhysPortCntEx is the number of physical ports, for devices with
	// more than 255.
	PhysPortCntEx uint32
}

// ODPCaps are a device's on-demand paging capabilities (struct
// ibv_odp_caps).
type ODPCaps struct {
	GeneralCaps      uint64 // enum ibv_odp_general_caps
	PerTransportCaps ODPPerTransportCaps
}

// ODPPerTransportCaps are the operations each transport can run on
// on-demand paged memory (ibv_odp_caps.per_transport_caps; enum
// ibv_odp_transport_cap_bits).
type ODPPerTransportCaps struct {
	RCODPCaps uint32
	UCODPCaps uint32
	UDODPCaps uint32
}

// On-demand paging capabilities (enum ibv_odp_general_caps and enum
// ibv_odp_transport_cap_bits).
const (
	ODPSupport         = 1 << 0 // IBV_ODP_SUPPORT
	ODPSupportImplicit = 1 << 1 // IBV_ODP_SUPPORT_IMPLICIT

	ODPSupportSend        = 1 << 0 // IBV_ODP_SUPPORT_SEND
	ODPSupportRecv        = 1 << 1 // IBV_ODP_SUPPORT_RECV
	ODPSupportWrite       = 1 << 2 // IBV_ODP_SUPPORT_WRITE
	ODPSupportRead        = 1 << 3 // IBV_ODP_SUPPORT_READ
	ODPSupportAtomic      = 1 << 4 // IBV_ODP_SUPPORT_ATOMIC
	ODPSupportSRQRecv     = 1 << 5 // IBV_ODP_SUPPORT_SRQ_RECV
	ODPSupportFlush       = 1 << 6 // IBV_ODP_SUPPORT_FLUSH
	ODPSupportAtomicWrite = 1 << 7 // IBV_ODP_SUPPORT_ATOMIC_WRITE
)

// Extended device capability flags: DeviceAttrEx.DeviceCapFlagsEx holds
// these above the 32 bits of enum ibv_device_cap_flags.
const (
	DeviceRawScatterFCS      = 1 << 34 // IBV_DEVICE_RAW_SCATTER_FCS
	DevicePCIWriteEndPadding = 1 << 36 // IBV_DEVICE_PCI_WRITE_END_PADDING
	DeviceCCDMABounce        = 1 << 41 // IBV_DEVICE_CC_DMA_BOUNCE
)

// TSOCaps are a device's TCP segmentation offload capabilities (struct
// ibv_tso_caps).
type TSOCaps struct {
	MaxTSO        uint32
	SupportedQPTs uint32 // a bit per QPType
}

// RSSCaps are a device's receive-side scaling capabilities (struct
// ibv_rss_caps).
type RSSCaps struct {
	SupportedQPTs              uint32
	MaxRWQIndirectionTables    uint32
	MaxRWQIndirectionTableSize uint32
	RXHashFieldsMask           uint64 // enum ibv_rx_hash_fields
	RXHashFunction             uint8  // enum ibv_rx_hash_function_flags
}

// PacketPacingCaps are a device's rate limits (struct
// ibv_packet_pacing_caps), in kbit/s.
type PacketPacingCaps struct {
	QPRateLimitMin uint32
	QPRateLimitMax uint32
	SupportedQPTs  uint32
}

// TMCaps are a device's tag matching capabilities (struct ibv_tm_caps).
type TMCaps struct {
	MaxRndvHdrSize uint32
	MaxNumTags     uint32
	Flags          uint32 // enum ibv_tm_cap_flags
	MaxOps         uint32
	MaxSGE         uint32
}

// CQModerationCaps are a device's limits on CQ moderation (struct
// ibv_cq_moderation_caps).
type CQModerationCaps struct {
	MaxCQCount  uint16
	MaxCQPeriod uint16 // µs
}

// PCIAtomicCaps are the operand sizes of a device's PCIe atomics (struct
// ibv_pci_atomic_caps; enum ibv_pci_atomic_op_size bits).
type PCIAtomicCaps struct {
	FetchAdd    uint16
	Swap        uint16
	CompareSwap uint16
}

// QueryDeviceEx returns the device's attributes with the extended ones
// (ibv_query_device_ex). input may be nil; its CompMask must be 0.
func (c *Context) QueryDeviceEx(input *QueryDeviceExInput) (DeviceAttrEx, error) {
	if err := c.check("ibv_query_device_ex"); err != nil {
		return DeviceAttrEx{}, err
	}
	if input != nil && input.CompMask != 0 {
		return DeviceAttrEx{}, Errorf("ibv_query_device_ex", ErrInvalidArgument, "comp_mask must be 0")
	}
	if d, ok := c.drv.(DeviceExDriver); ok {
		return d.QueryDeviceEx()
	}
	a, err := c.drv.QueryDevice()
	return DeviceAttrEx{OrigAttr: a}, err
}
