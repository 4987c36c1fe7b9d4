from tcc.driver.tcc_main import main

main()
