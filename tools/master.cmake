# mooncake_master program (owner: master helper).
# --enable_http_metadata_server uses the TE module's embeddable metadata server when the te
# module builds it (src/te/metadata_server.c in mc_te's sources).
set(_mc_master_libs mc_master mc_rpc mc_common mc_tools_common)
set(_mc_master_meta OFF)
if(TARGET mc_te)
  get_target_property(_mc_te_srcs mc_te SOURCES)
  foreach(_s ${_mc_te_srcs})
    if(_s MATCHES "metadata_server\\.c$")
      set(_mc_master_meta ON)
    endif()
  endforeach()
endif()
if(_mc_master_meta)
  list(APPEND _mc_master_libs mc_te)
endif()
mc_add_program(mooncake_master SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mooncake_master.c
               LIBS ${_mc_master_libs})
if(_mc_master_meta)
  target_compile_definitions(mooncake_master PRIVATE MC_HAVE_META_SERVER=1)
endif()
