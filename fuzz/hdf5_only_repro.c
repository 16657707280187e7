/* Reproduces the HDF5 findings of fuzz_checkpoint_reader without tessera (docs/fuzzing.md,
 * "Findings"): opens a file and reads its root attributes with plain HDF5 -- H5Aexists,
 * then H5Aread of each variable-length string -- as any reader of a checkpoint would.
 *
 *   <build>/bin/fuzz_hdf5_only_repro fuzz/findings/fuzz_checkpoint_reader-hdf5-...
 */
#include <hdf5.h>
#include <stdio.h>
int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <file>\n", argv[0]);
    return 2;
  }
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) { puts("open failed"); return 0; }
  const char* names[] = {"format", "format_version", "tessera_version", "layout", "mesh_data", "mesh_dp",
                         "mesh_tp", "mesh_domain", "world_size", "step", "metadata", "checksum_algorithm"};
  for (int i = 0; i < 12; ++i) {
    htri_t e = H5Aexists(f, names[i]);
    printf("%s exists %d\n", names[i], (int)e);
    if (e <= 0) continue;
    hid_t a = H5Aopen(f, names[i], H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    if (H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0) {
      hid_t m = H5Tcopy(H5T_C_S1); H5Tset_size(m, H5T_VARIABLE); H5Tset_cset(m, H5T_CSET_UTF8);
      hid_t s = H5Aget_space(a);
      if (H5Sget_simple_extent_npoints(s) == 1) { char* v = NULL; herr_t r = H5Aread(a, m, &v); printf("  read %d\n", (int)r); }
      H5Sclose(s); H5Tclose(m);
    }
    H5Tclose(t); H5Aclose(a);
  }
  H5Fclose(f);
  return 0;
}
