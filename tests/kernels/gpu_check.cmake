# The gpu_check program (needs the CUDA back end: it allocates device memory itself).
if(TANDEM_HAVE_CUDA)
  add_executable(gpu_check
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_elementwise.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_sampling.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_moe.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_attention.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_gemm.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_quant.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_decode.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_glue.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_fused.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_glm5_next.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_kda_chunk.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_rows_mma.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_moe_grouped.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_quant_grouped.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_mla_split.cpp ${CMAKE_CURRENT_LIST_DIR}/gpu_check_mla_flash.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_mla_mha.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gpu_check_moe_f32.cpp)
  target_link_libraries(gpu_check PRIVATE tandem_kernels CUDA::cudart)
endif()
if(TANDEM_HAVE_CUDA)
  add_executable(gpu_timing ${CMAKE_CURRENT_LIST_DIR}/gpu_timing.cpp)
  target_link_libraries(gpu_timing PRIVATE tandem_kernels CUDA::cudart)
endif()
