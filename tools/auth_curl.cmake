# mooncake_auth_curl: one signed HTTP request (operators, integration tests). Uses the metadata
# client's libcurl helper and src/common/http_auth.
mc_add_program(mooncake_auth_curl SOURCES ${CMAKE_CURRENT_LIST_DIR}/mooncake_auth_curl.c
  LIBS mc_te mc_common)
