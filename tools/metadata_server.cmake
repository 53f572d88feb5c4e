# mooncake_http_metadata_server: standalone HTTP metadata store (upstream REST protocol) with
# optional persistence. Links mc_te once src/te lists the metadata sources, else compiles them.
set(_mdsrv_use_te OFF)
if(TARGET mc_te)
  get_target_property(_mdsrv_te_srcs mc_te SOURCES)
  foreach(s ${_mdsrv_te_srcs})
    if(s MATCHES "metadata_server\\.c$")
      set(_mdsrv_use_te ON)
    endif()
  endforeach()
endif()
if(_mdsrv_use_te)
  mc_add_program(mooncake_http_metadata_server
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/mooncake_http_metadata_server.c
    LIBS mc_te mc_common m)
else()
  mc_add_program(mooncake_http_metadata_server
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/mooncake_http_metadata_server.c
            ${CMAKE_SOURCE_DIR}/src/te/metadata_server.c
    LIBS mc_common PkgConfig::MHD PkgConfig::XXHASH m)
endif()
