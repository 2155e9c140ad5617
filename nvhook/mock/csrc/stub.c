/*
 * Every driver library of the nvhook mock machine that need not work (graphics, video, OpenCL,
 * the 32-bit copies…): a real ELF shared object built with the real SONAME, so that ldconfig,
 * the dynamic loader and readelf treat it as the real one. It exports one symbol naming it.
 */
__attribute__((visibility("default"))) const char *nvhook_mock_stub_soname(void)
{
    return NVHOOK_STUB_SONAME;
}
