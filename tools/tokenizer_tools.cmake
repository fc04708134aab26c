# Tokenizer tools (included from tools/CMakeLists.txt).
add_executable(deltaserve-tokenize ${CMAKE_CURRENT_LIST_DIR}/tokenize.cpp)
target_include_directories(deltaserve-tokenize PRIVATE ${RAPIDJSON_INCLUDE})
target_link_libraries(deltaserve-tokenize PRIVATE ds_tokenizer ds_chat_template ds_warnings)

add_executable(deltaserve-bench-tokenizer ${CMAKE_CURRENT_LIST_DIR}/bench_tokenizer.cpp)
target_link_libraries(deltaserve-bench-tokenizer PRIVATE ds_tokenizer ds_warnings)
