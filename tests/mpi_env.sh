# mpi_env.sh: what OpenMPI needs under CI (root, a sandbox, 2 cores), for tests that run mpirun.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
MPI_FLAGS="--oversubscribe --bind-to none"
# The build has MPI when the binaries link libmpi.
mpi_available() { command -v mpirun >/dev/null && ldd "${1:-${STILL_BIN:-./still}}" 2>/dev/null | grep -q libmpi; }
